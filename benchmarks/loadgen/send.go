package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/workload"
	"github.com/driftguard/driftguard/internal/webhook"
)

// sender posts webhooks to one contender and retries what it did not take
// for a reason that may pass: a 5xx, a 429, no answer.
type sender struct {
	base     string
	client   *http.Client
	sign     *webhook.Signer
	attempts int
	giveUp   time.Duration
}

func newSender(base string, connections int, timeout time.Duration, sign *webhook.Signer, attempts int, giveUp time.Duration) *sender {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        connections,
		MaxIdleConnsPerHost: connections,
		MaxConnsPerHost:     connections,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &sender{base: base, client: &http.Client{Transport: tr, Timeout: timeout}, sign: sign, attempts: attempts, giveUp: giveUp}
}

func retryable(status int) bool {
	return status == 0 || status == http.StatusTooManyRequests || status >= 500
}

// send delivers it and returns how it ended.
func (s *sender) send(ctx context.Context, it workload.Item, phase string) model.Delivery {
	d := model.Delivery{Stream: it.Stream, EventID: it.EventID, Key: it.Key, Type: it.Type, Phase: phase}
	url := s.base + "/v1/webhooks/" + it.Stream
	first := time.Now()
	d.SentAtMicros = first.UnixMicro()
	backoff := 20 * time.Millisecond
	for {
		d.Attempts++
		start := time.Now()
		d.Status = s.post(ctx, url, it)
		d.AckMicros = time.Since(start).Microseconds()
		if !retryable(d.Status) || d.Attempts >= s.attempts || time.Since(first) > s.giveUp || ctx.Err() != nil {
			return d
		}
		select {
		case <-ctx.Done():
			return d
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// post sends one attempt and returns its status, 0 for no answer.
func (s *sender) post(ctx context.Context, url string, it workload.Item) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(it.Body))
	if err != nil {
		return 0
	}
	req.Header["Content-Type"] = []string{"application/json"}
	s.sign.Sign(req.Header, it.EventID, it.Body, time.Now())
	resp, err := s.client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// span is a stretch of items sent back to back under one phase name.
type span struct {
	phase string
	items []workload.Item
}

// run sends spans in order over connections workers, at rate webhooks a
// second (0: as fast as they go), and returns every delivery in the
// spans' order. mark is called when the first item of a span is handed
// to a worker (start) and when the last of its items is answered (end).
func (s *sender) run(ctx context.Context, spans []span, connections int, rate float64, mark func(phase, event string, at time.Time)) []model.Delivery {
	type job struct {
		i, span int
		it      workload.Item
	}
	var total int
	for _, sp := range spans {
		total += len(sp.items)
	}
	out := make([]model.Delivery, total)
	left := make([]atomic.Int64, len(spans))
	for i, sp := range spans {
		left[i].Store(int64(len(sp.items)))
	}
	jobs := make(chan job, connections)
	var wg sync.WaitGroup
	for range connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				out[j.i] = s.send(ctx, j.it, spans[j.span].phase)
				if left[j.span].Add(-1) == 0 {
					mark(spans[j.span].phase, "end", time.Now())
				}
			}
		}()
	}
	start := time.Now()
	i := 0
dispatch:
	for si, sp := range spans {
		for k, it := range sp.items {
			if rate > 0 {
				if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > time.Millisecond {
					time.Sleep(wait)
				}
			}
			if k == 0 {
				mark(sp.phase, "start", time.Now())
			}
			select {
			case jobs <- job{i: i, span: si, it: it}:
			case <-ctx.Done():
				break dispatch
			}
			i++
		}
	}
	close(jobs)
	wg.Wait()
	return out[:i]
}
