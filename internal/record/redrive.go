package record

import "strconv"

// Redrive puts dead letters back into `<stream>.in` as new deliveries of
// their original bytes (`driftguard redrive`). A redriven record carries
// ingest's headers, with dg-scheme SchemeRedrive, and HeaderRedriveOf, the
// position of the dead letter it came from.
const (
	// HeaderRedriveOf is the dead letter a redriven `<stream>.in` record
	// came from: "<dlq topic>/<partition>/<offset>" (RedrivePosition).
	HeaderRedriveOf = "dg-redrive-of"
	// SchemeRedrive is the dg-scheme of a redriven record: it was
	// authenticated when it was first accepted, not by a signature now.
	SchemeRedrive = "redrive"
)

// RedrivePosition is the value of HeaderRedriveOf for the dead letter at
// topic, partition and offset.
func RedrivePosition(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.Itoa(int(partition)) + "/" + strconv.FormatInt(offset, 10)
}
