// Package partition puts keys on partitions exactly as Kafka's Java client
// and franz-go do: toPositive(murmur2(key)) % partitions. Every driftguard
// component uses it, goka included, so a key written by ingest, a Java or
// Connect producer, or a goka emitter lands on the partition where the
// processor keeps that key's state. goka's default FNV hash does not match.
package partition

import "hash"

// murmur2Seed is the seed Kafka hard-codes in Utils.murmur2.
const murmur2Seed uint32 = 0x9747b28c

// Murmur2 is Kafka's murmur2 hash of data (org.apache.kafka.common.utils.Utils).
func Murmur2(data []byte) uint32 {
	const m uint32 = 0x5bd1e995
	const r = 24
	length := len(data)
	h := murmur2Seed ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[length&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// For returns the partition of key among n partitions.
func For(key []byte, n int32) int32 {
	return int32(Murmur2(key)&0x7fffffff) % n
}

// GokaHasher returns a hasher for goka.WithHasher, WithViewHasher and
// WithEmitterHasher. goka hands it to sarama's hash partitioner, which takes
// int32(Sum32()) % n and flips the sign of a negative result; returning the
// positive murmur2 value makes that equal to For.
func GokaHasher() func() hash.Hash32 {
	return func() hash.Hash32 { return &kafkaHash{} }
}

// kafkaHash buffers the key and hashes it on Sum32: murmur2 is not streaming.
type kafkaHash struct{ buf []byte }

func (h *kafkaHash) Write(p []byte) (int, error) { h.buf = append(h.buf, p...); return len(p), nil }
func (h *kafkaHash) Sum(b []byte) []byte {
	s := h.Sum32()
	return append(b, byte(s>>24), byte(s>>16), byte(s>>8), byte(s))
}
func (h *kafkaHash) Reset()         { h.buf = h.buf[:0] }
func (h *kafkaHash) Size() int      { return 4 }
func (h *kafkaHash) BlockSize() int { return 4 }
func (h *kafkaHash) Sum32() uint32  { return Murmur2(h.buf) & 0x7fffffff }
