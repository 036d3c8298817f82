package model

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// ReadDeliveries reads a sent.jsonl file.
func ReadDeliveries(path string) ([]Delivery, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Delivery
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var d Delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

// ReadState reads a State from a JSON file (expected.json, or what a
// contender reported).
func ReadState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// StreamsOf returns the streams deliveries were sent to, in Streams order.
func StreamsOf(sent []Delivery) []string {
	seen := map[string]bool{}
	for _, d := range sent {
		seen[d.Stream] = true
	}
	var out []string
	for _, s := range Streams {
		if seen[s] {
			out = append(out, s)
		}
	}
	return out
}

// WriteJSON writes v to path as indented JSON, the way every file of a
// run is written.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
