// A tiny Java client for the share and streams group tests (tests/kafka/test_share_streams.py),
// compiled by the test against tests/kafka/lib. Prints one result line on stdout:
//   RECORDS <n>           the share consumer received n records
//   PROCESSED <n>         the streams app processed n records
//   ERROR <class> <msg>   the client failed (e.g. GroupAuthorizationException)
//   TIMEOUT <n>           fewer than the wanted records before the deadline
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

public final class GroupsClient {
    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1];
        if (mode.equals("share")) share(bootstrap, args[2], args[3], Integer.parseInt(args[4]), Long.parseLong(args[5]));
        else streams(mode.equals("streams-count"), bootstrap, args[2], args[3], args[4], Integer.parseInt(args[5]), Long.parseLong(args[6]));
    }

    static String describe(Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && !(root instanceof org.apache.kafka.common.errors.ApiException)) root = root.getCause();
        return "ERROR " + root.getClass().getSimpleName() + " " + root.getMessage();
    }

    static void share(String bootstrap, String topic, String group, int want, long timeoutMs) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        int got = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(topic));
            while (got < want && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(500));
                got += records.count();
            }
            System.out.println((got >= want ? "RECORDS " : "TIMEOUT ") + got);
        } catch (Exception e) {
            System.out.println(describe(e));
        }
    }

    // streams: a stateless topology (no internal topics); streams-count: a count per key,
    // whose changelog topic the group's coordinator asks the broker to create
    static void streams(boolean count, String bootstrap, String app, String in, String out, int want, long timeoutMs) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/streams-" + app);
        p.put("consumer.auto.offset.reset", "earliest");
        AtomicInteger seen = new AtomicInteger();
        AtomicReference<String> failure = new AtomicReference<>();
        StreamsBuilder b = new StreamsBuilder();
        var stream = b.<String, String>stream(in).peek((k, v) -> seen.incrementAndGet());
        if (count) stream.groupByKey().count().toStream().mapValues(String::valueOf).to(out);
        else stream.mapValues(v -> v.toUpperCase()).to(out);
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, describe(e));
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (seen.get() < want && failure.get() == null && System.currentTimeMillis() < deadline) Thread.sleep(100);
        streams.close(Duration.ofSeconds(10));
        if (failure.get() != null) System.out.println(failure.get());
        else System.out.println((seen.get() >= want ? "PROCESSED " : "TIMEOUT ") + seen.get());
    }
}
