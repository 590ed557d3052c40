// The Java clients of tests/kafka/test_java_clients.py in one JVM (JVM starts are the cost):
// AdminClient, an idempotent and a transactional producer, a classic and a consumer-protocol
// (KIP-848) consumer, run against one bootstrap with the client properties of a file.
// Prints "OK <summary>" or "FAIL <step> <exception class> <message>" as its last line.
//
//   java JavaClients <bootstrap> <client.properties> <prefix>
//     topic <prefix>-t, groups <prefix>-classic / <prefix>-consumer, txn id <prefix>-txn
import java.io.FileInputStream;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class JavaClients {
    static String step = "start";

    public static void main(String[] args) throws Exception {
        Properties base = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) { base.load(in); }
        base.put("bootstrap.servers", args[0]);
        String prefix = args[2], topic = prefix + "-t";
        try {
            StringBuilder summary = new StringBuilder();
            step = "admin";
            try (Admin admin = Admin.create(base)) {
                admin.createTopics(List.of(new NewTopic(topic, 2, (short) -1))).all().get();
                int nodes = admin.describeCluster().nodes().get().size();
                // a new topic reaches every broker's metadata a moment after CreateTopics
                // returns (KRaft): a describe sent to one that has not seen it yet says
                // UNKNOWN_TOPIC_OR_PARTITION, directly as through the proxy; Kafka's own tests
                // wait for it too
                int partitions = -1;
                for (int attempt = 0; partitions < 0; attempt++) {
                    try {
                        partitions = admin.describeTopics(List.of(topic)).allTopicNames().get()
                            .get(topic).partitions().size();
                    } catch (java.util.concurrent.ExecutionException e) {
                        if (attempt >= 20 || !(e.getCause()
                                instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException)) throw e;
                        Thread.sleep(250);
                    }
                }
                if (!admin.listTopics().names().get().contains(topic)) throw new IllegalStateException("topic not listed");
                summary.append("nodes=").append(nodes).append(" partitions=").append(partitions);
            }
            step = "idempotent producer";
            Properties p = copy(base);
            p.put("enable.idempotence", "true");
            p.put("acks", "all");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < 5; i++) producer.send(new ProducerRecord<>(topic, "k" + i, "idempotent-" + i)).get();
            }
            step = "transactional producer";
            p.put("transactional.id", prefix + "-txn");
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                producer.initTransactions();
                producer.beginTransaction();
                for (int i = 0; i < 5; i++) producer.send(new ProducerRecord<>(topic, "k" + i, "txn-" + i));
                producer.commitTransaction();
            }
            for (String protocol : new String[] {"classic", "consumer"}) {
                step = protocol + " consumer";
                Properties c = copy(base);
                c.put("group.id", prefix + "-" + protocol);
                c.put("group.protocol", protocol);
                c.put("auto.offset.reset", "earliest");
                c.put("isolation.level", "read_committed");
                c.put("enable.auto.commit", "false");
                c.put("key.deserializer", StringDeserializer.class.getName());
                c.put("value.deserializer", StringDeserializer.class.getName());
                int got = 0;
                long deadline = System.currentTimeMillis() + 45000;
                try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                    consumer.subscribe(List.of(topic));
                    while (got < 10 && System.currentTimeMillis() < deadline) got += consumer.poll(Duration.ofMillis(500)).count();
                    consumer.commitSync();
                }
                if (got != 10) throw new IllegalStateException(protocol + " consumer got " + got + " of 10");
                summary.append(' ').append(protocol).append('=').append(got);
            }
            step = "admin offsets";
            try (Admin admin = Admin.create(base)) {
                Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(prefix + "-classic").partitionsToOffsetAndMetadata().get();
                long committed = offsets.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
                summary.append(" committed=").append(committed);
                admin.deleteTopics(Set.of(topic)).all().get();
            }
            System.out.println("OK " + summary);
        } catch (Exception e) {
            Throwable root = e;
            while (root.getCause() != null && root != root.getCause()) root = root.getCause();
            System.out.println("FAIL " + step + " " + root.getClass().getSimpleName() + " " + root.getMessage());
        }
    }

    static Properties copy(Properties from) {
        Properties p = new Properties();
        p.putAll(new HashMap<>(from));
        return p;
    }
}
