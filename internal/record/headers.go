package record

// SchemeBridge is the dg-scheme of the records the realtime bridge
// produces for its clients: they were authenticated by a client's token,
// not by a webhook signature.
const SchemeBridge = "bridge"

// SchemeAdmin is the dg-scheme of operator actions (ControlType records):
// `driftguard admin` wrote them with its Kafka credentials, or the admin
// endpoint did for a caller its token authenticated.
const SchemeAdmin = "admin"
