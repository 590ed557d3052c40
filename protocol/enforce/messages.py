"""The default message of each Kafka error code the proxy answers with.

Kafka fills `error_message` fields of its error responses with the exception's message,
which for these errors is `Errors.X.message()` (clients/.../protocol/Errors.java). Some
clients rely on it being present: librdkafka 2.16 corrupts its heap on a null message in
a DescribeUserScramCredentials error answer.
"""

DEFAULT_MESSAGES: dict[int, str] = {
    -1: "The server experienced an unexpected error when processing the request.",
    3: "This server does not host this topic-partition.",
    15: "The coordinator is not available.",
    29: "Topic authorization failed.",
    30: "Group authorization failed.",
    31: "Cluster authorization failed.",
    33: "The broker does not support the requested SASL mechanism.",
    34: "Request is not valid given the current SASL state.",
    35: "The version of API is not supported.",
    42: "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.",
    53: "Transactional Id authorization failed.",
    55: "The broker did not attempt to execute this operation. This may happen for batched RPCs where some operations in the batch failed, causing the broker to respond without trying the rest.",
    58: "SASL Authentication failed.",
    65: "Delegation Token authorization failed.",
    73: "Topic deletion is disabled.",
    100: "This server does not host this topic ID.",
}
