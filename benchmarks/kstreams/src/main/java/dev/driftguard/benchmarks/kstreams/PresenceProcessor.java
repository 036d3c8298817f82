package dev.driftguard.benchmarks.kstreams;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The presence processor's job (driftguard's latest policy without device
 * rows): per user, drop an event id already seen (duplicate), drop a
 * version not greater than the last applied one (stale), apply the rest
 * (last version wins). Every decision is an outcome record; every applied
 * change a state record, both in driftguard's shapes (internal/record).
 */
final class PresenceProcessor implements Processor<byte[], byte[], byte[], byte[]> {
    static final String OUTCOMES = "outcomes";
    static final String STATE = "state";
    static final String DLQ = "dlq";

    /** The shipped presence stream's fixed type and claim lifetime (catalogue ttl). */
    private static final String TYPE = "presence.changed";
    private static final long TTL_MS = 5 * 60 * 1000;

    private static final JsonFactory JSON = new JsonFactory();

    private final String stream;
    private final String storeName;
    private ProcessorContext<byte[], byte[]> context;
    private KeyValueStore<String, PresenceState> store;
    private final ByteArrayOutputStream buf = new ByteArrayOutputStream(1024);

    PresenceProcessor(String stream, String storeName) {
        this.stream = stream;
        this.storeName = storeName;
    }

    @Override
    public void init(ProcessorContext<byte[], byte[]> context) {
        this.context = context;
        this.store = context.getStateStore(storeName);
    }

    @Override
    public void process(Record<byte[], byte[]> rec) {
        RecordMetadata meta = context.recordMetadata().orElseThrow();
        String key = rec.key() == null ? "" : new String(rec.key(), StandardCharsets.UTF_8);
        PresenceEvent ev;
        try {
            ev = PresenceEvent.parse(rec.value() == null ? new byte[0] : rec.value());
        } catch (IOException e) {
            deadLetter(rec, meta, key, "undecodable", e.getMessage());
            return;
        }
        if (!ev.userId.equals(key)) {
            deadLetter(rec, meta, key, "key_mismatch", "record key " + key + ", body key " + ev.userId);
            return;
        }
        Headers headers = rec.headers();
        if (ev.eventId == null) {
            ev.eventId = header(headers, "dg-event-id");
            if (ev.eventId == null) {
                deadLetter(rec, meta, key, "undecodable", "event_id is missing");
                return;
            }
        }
        long receivedAtMs = rec.timestamp();
        String receivedAt = header(headers, "dg-received-at");
        if (receivedAt != null) {
            try {
                receivedAtMs = Long.parseLong(receivedAt);
            } catch (NumberFormatException ignored) {
                // A foreign producer's header: the record timestamp stands.
            }
        }

        PresenceState s = store.get(key);
        if (s == null) {
            s = new PresenceState();
        }
        String outcome;
        long gap = 0;
        if (!s.firstSight(ev.eventId, receivedAtMs)) {
            outcome = "duplicate";
        } else if (s.applied && ev.sequenceNumber <= s.version) {
            outcome = "stale";
        } else {
            outcome = "applied";
            if (s.applied) {
                gap = ev.sequenceNumber - s.version - 1;
            }
            s.applied = true;
            s.version = ev.sequenceNumber;
            s.updatedAtMs = receivedAtMs;
            s.expiresAtMs = ev.expiresAtMs != 0 ? ev.expiresAtMs
                    : ev.occurredAtMs != 0 ? ev.occurredAtMs + TTL_MS : receivedAtMs + TTL_MS;
        }
        // The dedup memory changes with every new id, stale ones too; a
        // duplicate changes it only when ids fell out of the window.
        if (!outcome.equals("duplicate") || s.forgot) {
            store.put(key, s);
        }
        long now = System.currentTimeMillis();
        // The body as JSON text, once for the outcome and the state.
        String body = new String(rec.value(), StandardCharsets.UTF_8);
        context.forward(new Record<>(rec.key(), outcome(key, ev, outcome, gap, receivedAtMs, now, meta, body), now), OUTCOMES);
        if (outcome.equals("applied")) {
            context.forward(new Record<>(rec.key(), state(key, s, body), now), STATE);
        }
    }

    private byte[] outcome(String key, PresenceEvent ev, String outcome, long gap, long receivedAtMs, long now,
            RecordMetadata meta, String body) {
        return json(g -> {
            g.writeStringField("stream", stream);
            g.writeStringField("key", key);
            g.writeStringField("event_id", ev.eventId);
            g.writeStringField("type", TYPE);
            g.writeNumberField("version", ev.sequenceNumber);
            g.writeStringField("outcome", outcome);
            g.writeNumberField("gap", gap);
            g.writeNumberField("buffer_depth", 0);
            g.writeNumberField("occurred_at_ms", ev.occurredAtMs);
            g.writeNumberField("received_at_ms", receivedAtMs);
            g.writeNumberField("processed_at_ms", now);
            g.writeNumberField("input_partition", meta.partition());
            g.writeNumberField("input_offset", meta.offset());
            // record.InputDecisionID: the input's position and the index
            // of the decision among its outcomes (always one here).
            g.writeStringField("decision_id", stream + "/" + meta.partition() + "/" + meta.offset() + "/0");
            g.writeFieldName("payload");
            g.writeRawValue(body);
        });
    }

    private byte[] state(String key, PresenceState s, String body) {
        return json(g -> {
            g.writeStringField("stream", stream);
            g.writeStringField("key", key);
            g.writeNumberField("version", s.version);
            g.writeFieldName("state");
            g.writeRawValue(body);
            g.writeNumberField("updated_at_ms", s.updatedAtMs);
            g.writeNumberField("expires_at_ms", s.expiresAtMs);
        });
    }

    /** A dead letter in driftguard's shape (record.DeadLetter), so nothing accepted is lost silently. */
    private void deadLetter(Record<byte[], byte[]> rec, RecordMetadata meta, String key, String reason, String detail) {
        byte[] payload = rec.value() == null ? new byte[0] : rec.value();
        context.forward(new Record<>(rec.key(), json(g -> {
            g.writeStringField("stream", stream);
            g.writeStringField("topic", meta.topic());
            g.writeNumberField("partition", meta.partition());
            g.writeNumberField("offset", meta.offset());
            g.writeStringField("key", key);
            g.writeStringField("reason", reason);
            g.writeStringField("detail", detail);
            g.writeNumberField("at_ms", System.currentTimeMillis());
            g.writeFieldName("payload");
            g.writeBinary(payload);
        }), rec.timestamp()), DLQ);
    }

    private static String header(Headers headers, String name) {
        Header h = headers.lastHeader(name);
        return h == null || h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8);
    }

    private interface Fields {
        void write(JsonGenerator g) throws IOException;
    }

    private byte[] json(Fields fields) {
        buf.reset();
        try (JsonGenerator g = JSON.createGenerator(buf)) {
            g.writeStartObject();
            fields.write(g);
            g.writeEndObject();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return buf.toByteArray();
    }
}
