"""A tiny producer/consumer for trying the demo: `python -m aclgate.proxy.demo.client --help`."""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aclgate.proxy.demo.client", description=__doc__
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce", help="send one message per VALUE")
    p.add_argument("topic")
    p.add_argument("values", nargs="+", metavar="VALUE")
    c = sub.add_parser("consume", help="print messages from the beginning, then stop when idle")
    c.add_argument("topic")
    c.add_argument("--group", default="democlient")
    c.add_argument(
        "--idle",
        type=float,
        default=5.0,
        help="seconds without messages before exiting, counted from the group's assignment",
    )
    c.add_argument(
        "--join-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for the group to assign partitions before giving up",
    )
    args = parser.parse_args(argv)
    try:
        from confluent_kafka import Consumer, Producer
    except ImportError:
        print("this needs confluent-kafka: pip install 'aclgate[demo]'", file=sys.stderr)
        return 2
    if args.command == "produce":
        errors: list[str] = []

        def delivered(err, msg) -> None:
            if err is not None:
                errors.append(str(err))

        producer = Producer({"bootstrap.servers": args.bootstrap, "message.timeout.ms": 10000})
        for value in args.values:
            producer.produce(args.topic, value.encode(), on_delivery=delivered)
        left = producer.flush(15)
        if errors or left:
            print(
                f"not sent to {args.topic}: {errors[0] if errors else 'timed out'}", file=sys.stderr
            )
            return 1
        print(f"sent {len(args.values)} message(s) to {args.topic}")
        return 0
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    # The idle clock starts at the assignment, not at subscribe: a group join can take
    # seconds on a busy broker, and exiting before it would read nothing.
    idle_since: float | None = None  # set at the assignment, moved on by each message

    def on_assign(consumer: Consumer, partitions: list) -> None:
        nonlocal idle_since
        if idle_since is None:
            idle_since = time.monotonic()

    consumer.subscribe([args.topic], on_assign=on_assign)
    started = time.monotonic()
    count = 0
    try:
        while True:
            now = time.monotonic()
            if idle_since is None:
                if now - started >= args.join_timeout:
                    print(
                        f"no partitions of {args.topic} assigned within {args.join_timeout:g} s",
                        file=sys.stderr,
                    )
                    return 1
            elif now - idle_since >= args.idle:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error:
                print(f"error: {error}", file=sys.stderr)
                if error.fatal() or "AUTHORIZATION" in error.name():
                    return 1
                continue
            value = msg.value()
            text = value.decode(errors="replace") if value is not None else "(null)"
            print(f"{msg.topic()}[{msg.partition()}]@{msg.offset()}: {text}")
            count += 1
            idle_since = time.monotonic()
    finally:
        consumer.close()
    print(f"read {count} message(s) from {args.topic}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
