// Package service runs driftguard's components. Each component is a Service;
// a subcommand runs one, `dev` runs them all in one process, and the first
// to fail stops the others.
package service

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/driftguard/driftguard/internal/telemetry"
)

// Service is one long-running component.
type Service interface {
	// Name identifies the service in logs and errors.
	Name() string
	// Run blocks until ctx is done (returning nil) or the service fails.
	Run(ctx context.Context) error
}

// Func adapts a function to a Service.
type Func struct {
	Label string
	Fn    func(ctx context.Context) error
}

// Name implements Service.
func (f Func) Name() string { return f.Label }

// Run implements Service.
func (f Func) Run(ctx context.Context) error { return f.Fn(ctx) }

// RunAll runs the services until ctx is done or one of them fails; a
// failure cancels the rest and is returned with the service's name. Each
// runs under the profile label service=<its name>, so that a continuous
// profile of a process running several (dev) tells them apart.
func RunAll(ctx context.Context, services ...Service) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range services {
		g.Go(func() error {
			if err := telemetry.Labeled(ctx, s.Run, "service", s.Name()); err != nil && ctx.Err() == nil {
				return fmt.Errorf("%s: %w", s.Name(), err)
			}
			return nil
		})
	}
	return g.Wait()
}
