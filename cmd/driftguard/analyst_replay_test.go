package main

import "slices"

// replayRequests are the replay requests the workflow history implies:
// one per buffered step, from the sequence after the last applied, and
// whether that sequence was applied later.
func (h *history) replayRequests() (requests []replayWant) {
	applied := map[string]int64{}
	filled := map[replayWant]bool{}
	for _, d := range h.decisionsOf("workflow") {
		switch d.outcome {
		case "applied":
			applied[d.ev.key] = max(applied[d.ev.key], d.version)
			filled[replayWant{key: d.ev.key, from: d.version}] = true
		case "buffered":
			requests = append(requests, replayWant{key: d.ev.key, from: applied[d.ev.key] + 1})
		}
	}
	for i, r := range requests {
		requests[i].filled = filled[replayWant{key: r.key, from: r.from}]
	}
	return requests
}

type replayWant struct {
	key    string
	from   int64
	filled bool
}

// No relay runs in this history: every request stays requested, and is
// filled when its sequence was applied.
func (h *history) checkReplayRequests(got [][]any) {
	var want, rows [][]any
	for _, r := range h.replayRequests() {
		want = append(want, []any{r.key, r.from, "requested", 0, 0, 0, r.filled})
	}
	for _, row := range got {
		// entity_key, from_sequence, request_id, requested_at_ms,
		// relay_result, delivered_at_ms, last_status, post_attempts,
		// filled_at_ms.
		rows = append(rows, []any{row[0], row[1], row[4], row[5], row[6], row[7], row[8].(int64) > 0})
	}
	sortRows(want)
	sortRows(rows)
	h.expect(rows, want)
}

func (h *history) checkGapsNeverFilled(got [][]any) {
	counts := map[replayWant]int{}
	var order []replayWant
	for _, r := range h.replayRequests() {
		if r.filled {
			continue
		}
		if counts[r] == 0 {
			order = append(order, r)
		}
		counts[r]++
	}
	var want, rows [][]any
	for _, r := range order {
		want = append(want, []any{r.key, r.from, counts[r], 0})
	}
	for _, row := range got {
		// entity_key, from_sequence, first_requested_at_ms, requests,
		// delivered.
		rows = append(rows, []any{row[0], row[1], row[3], row[4]})
	}
	sortRows(want)
	h.expect(rows, want)
	if len(want) != 1 {
		h.t.Errorf("the history should leave exactly one gap unfilled, has %v", want)
	}
}

// sortRows orders rows by their first two cells, a key and a sequence.
func sortRows(rows [][]any) {
	slices.SortStableFunc(rows, func(a, b []any) int {
		if a[0].(string) != b[0].(string) {
			if a[0].(string) < b[0].(string) {
				return -1
			}
			return 1
		}
		return int(a[1].(int64) - b[1].(int64))
	})
}
