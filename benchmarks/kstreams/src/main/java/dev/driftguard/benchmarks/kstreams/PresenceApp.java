package dev.driftguard.benchmarks.kstreams;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * A Kafka Streams application doing driftguard's presence processor's job,
 * built the way a team would build it: the Processor API, one persistent
 * (RocksDB) key-value store with its changelog, Kafka Streams' defaults for
 * everything else (one stream thread, no record cache on a Processor API
 * store, commit.interval.ms 30 s at-least-once and 100 ms exactly-once).
 *
 * <pre>
 * java -jar presence-kstreams.jar --bootstrap-servers 127.0.0.1:9092 \
 *   --guarantee at_least_once|exactly_once_v2 --state-dir /tmp/ks \
 *   [--warmup NAME] --measure NAME [--config KEY=VALUE]... [--caching true]
 * </pre>
 *
 * NAME is a stream as driftguard names its topics: the application reads
 * NAME.in and writes NAME.outcomes, NAME.state and NAME.dlq, all of which
 * must exist, under the application id NAME (its store's changelog is
 * Kafka Streams' own NAME-presence-changelog). With --warmup it first runs
 * on the warm-up stream, so that the JIT has compiled the hot paths before
 * the measured run, and switches to the measured stream when it reads the
 * line "measure" on stdin; it stops cleanly on the line "stop" or at the
 * end of stdin, and exits non-zero when Kafka Streams fails. Each --config
 * sets one Kafka Streams (or, prefixed, client) property over the defaults,
 * for experiments beyond the benchmark's contenders, as does --caching true,
 * which turns on the store's record cache (off by default for a Processor
 * API store): the store then writes its changelog once per key per commit
 * instead of once per event.
 */
public final class PresenceApp {
    private static final String STORE = "presence";

    private PresenceApp() {}

    public static void main(String[] args) throws Exception {
        Properties overrides = new Properties();
        Map<String, String> flags = parse(args, overrides);
        String bootstrap = required(flags, "bootstrap-servers");
        String guarantee = flags.getOrDefault("guarantee", StreamsConfig.AT_LEAST_ONCE);
        if (!guarantee.equals(StreamsConfig.AT_LEAST_ONCE) && !guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2)) {
            usage("--guarantee must be at_least_once or exactly_once_v2, not " + guarantee);
        }
        Path stateDir = Path.of(flags.getOrDefault("state-dir", Files.createTempDirectory("presence-kstreams").toString()));
        String measure = required(flags, "measure");
        String warmup = flags.get("warmup");
        boolean caching = Boolean.parseBoolean(flags.getOrDefault("caching", "false"));

        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        if (warmup != null) {
            Instance w = Instance.start(warmup, bootstrap, guarantee, stateDir, overrides, caching);
            System.out.println("warmup " + warmup);
            System.out.flush();
            String line = waitFor(stdin, w, "measure");
            w.close();
            if (!"measure".equals(line)) {
                return;
            }
        }
        Instance m = Instance.start(measure, bootstrap, guarantee, stateDir, overrides, caching);
        System.out.println("measure " + measure);
        System.out.flush();
        waitFor(stdin, m, "stop");
        m.close();
    }

    /** One KafkaStreams instance on one stream's topics. */
    private static final class Instance {
        final KafkaStreams streams;
        final CountDownLatch failed = new CountDownLatch(1);

        private Instance(KafkaStreams streams) {
            this.streams = streams;
        }

        static Instance start(String name, String bootstrap, String guarantee, Path stateDir, Properties overrides,
                boolean caching) {
            Properties props = new Properties();
            props.putAll(overrides);
            props.put(StreamsConfig.APPLICATION_ID_CONFIG, name);
            props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
            props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
            Instance in = new Instance(new KafkaStreams(topology(name, caching), props));
            in.streams.setUncaughtExceptionHandler(e -> {
                System.err.println("kafka streams failed: " + e);
                in.failed.countDown();
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            in.streams.setStateListener((now, before) -> {
                if (now == KafkaStreams.State.ERROR) {
                    in.failed.countDown();
                }
            });
            in.streams.start();
            return in;
        }

        void close() {
            streams.close(Duration.ofSeconds(60));
            streams.cleanUp();
        }
    }

    static Topology topology(String name, boolean caching) {
        Topology t = new Topology();
        t.addSource("in", new ByteArrayDeserializer(), new ByteArrayDeserializer(), name + ".in");
        t.addProcessor("decide", () -> new PresenceProcessor(name, STORE), "in");
        StoreBuilder<KeyValueStore<String, PresenceState>> store =
                Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE), Serdes.String(), PresenceState.serde());
        t.addStateStore(caching ? store.withCachingEnabled() : store, "decide");
        t.addSink(PresenceProcessor.OUTCOMES, name + ".outcomes", new ByteArraySerializer(), new ByteArraySerializer(), "decide");
        t.addSink(PresenceProcessor.STATE, name + ".state", new ByteArraySerializer(), new ByteArraySerializer(), "decide");
        t.addSink(PresenceProcessor.DLQ, name + ".dlq", new ByteArraySerializer(), new ByteArraySerializer(), "decide");
        return t;
    }

    /**
     * Reads stdin until the line want (or its end, then null), giving up
     * with exit status 1 when the instance fails meanwhile.
     */
    private static String waitFor(BufferedReader stdin, Instance in, String want) throws Exception {
        Thread watcher = new Thread(() -> {
            try {
                in.failed.await();
                in.streams.close(Duration.ofSeconds(10));
                System.exit(1);
            } catch (InterruptedException ignored) {
                // The caller is done with this instance.
            }
        });
        watcher.setDaemon(true);
        watcher.start();
        try {
            for (String line; (line = stdin.readLine()) != null; ) {
                if (line.trim().equals(want)) {
                    return want;
                }
            }
            return null;
        } finally {
            watcher.interrupt();
            watcher.join(TimeUnit.SECONDS.toMillis(5));
        }
    }

    private static Map<String, String> parse(String[] args, Properties overrides) {
        Map<String, String> flags = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--") || a.length() == 2) {
                usage("unexpected argument " + a);
            }
            String name = a.substring(2);
            String value;
            int eq = name.indexOf('=');
            if (eq >= 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            } else if (i + 1 < args.length) {
                value = args[++i];
            } else {
                usage("--" + name + " needs a value");
                return flags;
            }
            if (name.equals("config")) {
                int kv = value.indexOf('=');
                if (kv <= 0) {
                    usage("--config takes KEY=VALUE, not " + value);
                }
                overrides.put(value.substring(0, kv), value.substring(kv + 1));
                continue;
            }
            flags.put(name, value);
        }
        return flags;
    }

    private static String required(Map<String, String> flags, String name) {
        String v = flags.get(name);
        if (v == null || v.isEmpty()) {
            usage("--" + name + " is required");
        }
        return v;
    }

    private static void usage(String problem) {
        System.err.println("presence-kstreams: " + problem);
        System.err.println("usage: java -jar presence-kstreams.jar --bootstrap-servers HOST:PORT"
                + " [--guarantee at_least_once|exactly_once_v2] [--state-dir DIR] [--warmup NAME] --measure NAME"
                + " [--config KEY=VALUE]... [--caching true]");
        System.exit(2);
    }
}
