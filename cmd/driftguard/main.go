// Command driftguard runs one driftguard component, or all of them with
// `driftguard dev`. See `driftguard help`. This is driftguard's composition
// root: the only package that imports the components (ingest, processors,
// sinks), which otherwise meet only in Kafka.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
