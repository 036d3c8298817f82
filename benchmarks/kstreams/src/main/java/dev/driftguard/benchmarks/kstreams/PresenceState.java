package dev.driftguard.benchmarks.kstreams;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;

/**
 * What the store keeps per user: the last applied version and the dedup
 * memory, as driftguard's table row does (processors/decide/entity.go). An
 * event id is remembered as its 64-bit FNV-1a hash with the received_at of
 * its first sight; ids older than the window before the newest event are
 * forgotten, and past {@link #DEDUP_IDS} the oldest go first.
 */
final class PresenceState {
    /** limits.dedup_ids and limits.dedup_window of the shipped presence stream. */
    static final int DEDUP_IDS = 256;
    static final long DEDUP_WINDOW_MS = 7L * 24 * 3600 * 1000;

    boolean applied;
    long version;
    long updatedAtMs;
    long expiresAtMs;
    int count;
    long[] hashes = new long[8];
    long[] seenAtMs = new long[8];
    /** Set by firstSight when it forgot ids, so that even a duplicate changed the value. */
    boolean forgot;

    /**
     * firstSight reports whether the id is new to this user and, when it is,
     * remembers it at receivedAtMs, after forgetting what fell out of the
     * window.
     */
    boolean firstSight(String eventId, long receivedAtMs) {
        long h = fnv1a(eventId);
        long cutoff = receivedAtMs - DEDUP_WINDOW_MS;
        int kept = 0;
        boolean found = false;
        for (int i = 0; i < count; i++) {
            if (seenAtMs[i] < cutoff) {
                continue;
            }
            hashes[kept] = hashes[i];
            seenAtMs[kept] = seenAtMs[i];
            kept++;
            found |= hashes[i] == h;
        }
        forgot = kept < count;
        count = kept;
        if (found) {
            return false;
        }
        if (count == DEDUP_IDS) {
            System.arraycopy(hashes, 1, hashes, 0, count - 1);
            System.arraycopy(seenAtMs, 1, seenAtMs, 0, count - 1);
            count--;
        }
        if (count == hashes.length) {
            int grown = Math.min(DEDUP_IDS, hashes.length * 2);
            hashes = java.util.Arrays.copyOf(hashes, grown);
            seenAtMs = java.util.Arrays.copyOf(seenAtMs, grown);
        }
        hashes[count] = h;
        seenAtMs[count] = receivedAtMs;
        count++;
        return true;
    }

    /** The 64-bit FNV-1a hash of the id's UTF-8 bytes, driftguard's idHash. */
    static long fnv1a(String id) {
        long h = 0xcbf29ce484222325L;
        for (byte b : id.getBytes(StandardCharsets.UTF_8)) {
            h ^= b & 0xff;
            h *= 0x100000001b3L;
        }
        return h;
    }

    /** The store's serde: a fixed header, then (hash, seen) pairs. */
    static Serde<PresenceState> serde() {
        Serializer<PresenceState> ser = (topic, s) -> {
            if (s == null) {
                return null;
            }
            ByteBuffer b = ByteBuffer.allocate(1 + 3 * 8 + 4 + s.count * 16);
            b.put((byte) (s.applied ? 1 : 0)).putLong(s.version).putLong(s.updatedAtMs).putLong(s.expiresAtMs);
            b.putInt(s.count);
            for (int i = 0; i < s.count; i++) {
                b.putLong(s.hashes[i]).putLong(s.seenAtMs[i]);
            }
            return b.array();
        };
        Deserializer<PresenceState> de = (topic, data) -> {
            if (data == null) {
                return null;
            }
            try {
                ByteBuffer b = ByteBuffer.wrap(data);
                PresenceState s = new PresenceState();
                s.applied = b.get() == 1;
                s.version = b.getLong();
                s.updatedAtMs = b.getLong();
                s.expiresAtMs = b.getLong();
                s.count = b.getInt();
                if (s.count < 0 || s.count > DEDUP_IDS) {
                    throw new SerializationException("presence state with " + s.count + " remembered ids");
                }
                s.hashes = new long[Math.max(8, s.count)];
                s.seenAtMs = new long[s.hashes.length];
                for (int i = 0; i < s.count; i++) {
                    s.hashes[i] = b.getLong();
                    s.seenAtMs[i] = b.getLong();
                }
                return s;
            } catch (BufferUnderflowException e) {
                throw new SerializationException("truncated presence state", e);
            }
        };
        return Serdes.serdeFrom(ser, de);
    }
}
