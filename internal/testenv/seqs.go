package testenv

// Seqs is from, from+1, ..., to: the sequences a test expects, as
// conversation_seq runs.
func Seqs(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}
