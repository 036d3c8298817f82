package record

// SchemeBridge is the dg-scheme of the records the realtime bridge
// produces for its clients: they were authenticated by a client's token,
// not by a webhook signature.
const SchemeBridge = "bridge"
