package dev.driftguard.benchmarks.kstreams;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;

/**
 * What the presence rules read of a webhook body: the fields of driftguard's
 * shipped presence stream (schemas/catalogue.yaml), read with Jackson's
 * streaming parser. Other fields are skipped; the body itself travels on
 * untouched as the outcome's payload and the public state.
 */
final class PresenceEvent {
    String eventId;
    String userId;
    long sequenceNumber;
    boolean hasSequenceNumber;
    /** The source clocks, unix ms; 0 when absent. */
    long occurredAtMs;
    long expiresAtMs;

    private static final JsonFactory JSON = new JsonFactory();

    /** Reads body, or throws with what is wrong with it. */
    static PresenceEvent parse(byte[] body) throws IOException {
        PresenceEvent ev = new PresenceEvent();
        try (JsonParser p = JSON.createParser(body)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                throw new IOException("the body is not a JSON object");
            }
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String field = p.currentName();
                JsonToken value = p.nextToken();
                switch (field) {
                    case "event_id" -> ev.eventId = text(p, value, field);
                    case "user_id" -> ev.userId = text(p, value, field);
                    case "sequence_number" -> {
                        ev.sequenceNumber = integer(p, value, field);
                        ev.hasSequenceNumber = true;
                    }
                    // Seconds, as the catalogue's occurred_at_unit says.
                    case "timestamp" -> ev.occurredAtMs = integer(p, value, field) * 1000;
                    case "expires_at" -> ev.expiresAtMs = integer(p, value, field) * 1000;
                    default -> p.skipChildren();
                }
            }
        }
        if (ev.userId == null || ev.userId.isEmpty()) {
            throw new IOException("user_id is missing");
        }
        if (!ev.hasSequenceNumber) {
            throw new IOException("sequence_number is missing");
        }
        return ev;
    }

    private static String text(JsonParser p, JsonToken value, String field) throws IOException {
        if (value != JsonToken.VALUE_STRING) {
            throw new IOException(field + " is not a string");
        }
        return p.getText();
    }

    private static long integer(JsonParser p, JsonToken value, String field) throws IOException {
        if (value != JsonToken.VALUE_NUMBER_INT) {
            throw new IOException(field + " is not an integer");
        }
        return p.getLongValue();
    }
}
