// A Java client subscribing by regex for tests/kafka/test_regex_subscription.py, compiled by
// the test against tests/kafka/lib. Client properties (SASL etc.) come from a file.
//
//   java RegexClient consumer <bootstrap> <client.properties> <group> <regex> <timeoutMs>
//     a KafkaConsumer on group.protocol=consumer with subscribe(new SubscriptionPattern(regex))
//     (KIP-848: the broker resolves the RE2J regex). It runs until its stdin is closed or the
//     timeout, printing one flushed line per event so the test can act while it runs:
//       ASSIGNED <topic-partition,...>   the assignment changed (sorted, possibly empty)
//       RECORD <topic> <value>           a record was read
//       ERROR <class> <message>          the consumer failed (the last line)
//       END                              stopped normally (the last line)
//
//   java RegexClient streams <bootstrap> <client.properties> <app> <regex> <sink> <timeoutMs>
//     a Kafka Streams app on group.protocol=streams whose source is builder.stream(Pattern);
//     one result line: "PROCESSED <n>", "TIMEOUT <n>" or "ERROR <class> <message>".
import java.io.FileInputStream;
import java.io.InputStream;
import java.time.Duration;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

public final class RegexClient {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        try (FileInputStream in = new FileInputStream(args[2])) { p.load(in); }
        p.put("bootstrap.servers", args[1]);
        if (args[0].equals("consumer")) consumer(p, args[3], args[4], Long.parseLong(args[5]));
        else streams(p, args[3], args[4], args[5], Long.parseLong(args[6]));
    }

    static void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String describe(Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && !(root instanceof ApiException)) root = root.getCause();
        return "ERROR " + root.getClass().getSimpleName() + " " + root.getMessage();
    }

    /** Sets `stop` once stdin reaches its end: the test closes it to end the run. */
    static AtomicBoolean stopOnStdinEnd() {
        AtomicBoolean stop = new AtomicBoolean();
        Thread t = new Thread(() -> {
            try {
                InputStream in = System.in;
                while (in.read() >= 0) { }
            } catch (Exception ignored) { }
            stop.set(true);
        });
        t.setDaemon(true);
        t.start();
        return stop;
    }

    static void consumer(Properties p, String group, String regex, long timeoutMs) {
        p.put("group.id", group);
        p.put("group.protocol", "consumer");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        AtomicBoolean stop = stopOnStdinEnd();
        long deadline = System.currentTimeMillis() + timeoutMs;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(new SubscriptionPattern(regex));
            String assigned = null;
            while (!stop.get() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200)))
                    emit("RECORD " + r.topic() + " " + r.value());
                Set<String> now = new TreeSet<>();
                for (TopicPartition tp : c.assignment()) now.add(tp.toString());
                String line = String.join(",", now);
                if (!line.equals(assigned)) emit("ASSIGNED " + line);
                assigned = line;
            }
        } catch (Exception e) {
            emit(describe(e));
            return;
        }
        emit("END");
    }

    static void streams(Properties p, String app, String regex, String sink, long timeoutMs) throws Exception {
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        p.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/streams-" + app);
        p.put("consumer.auto.offset.reset", "earliest");
        AtomicInteger seen = new AtomicInteger();
        AtomicReference<String> failure = new AtomicReference<>();
        StreamsBuilder b = new StreamsBuilder();
        b.stream(Pattern.compile(regex), Consumed.with(Serdes.String(), Serdes.String()))
            .peek((k, v) -> seen.incrementAndGet())
            .to(sink, Produced.with(Serdes.String(), Serdes.String()));
        KafkaStreams streams;
        try {
            streams = new KafkaStreams(b.build(), p);
        } catch (Exception e) { // Kafka Streams 4.3.1 refuses a Pattern source on "streams" here
            emit(describe(e));
            return;
        }
        // a later Kafka Streams that accepts it: run until a record is processed or it fails
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, describe(e));
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (seen.get() == 0 && failure.get() == null && System.currentTimeMillis() < deadline) Thread.sleep(100);
        streams.close(Duration.ofSeconds(10));
        emit(failure.get() != null ? failure.get() : (seen.get() > 0 ? "PROCESSED " : "TIMEOUT ") + seen.get());
    }
}
