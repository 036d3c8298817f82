package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/driftguard/driftguard/internal/naming"
)

// Naming is the prefixes every Kafka name of this configuration is built
// with: kafka.topic_prefix and kafka.group_prefix.
func (k Kafka) Naming() naming.Prefixes {
	return naming.Prefixes{TopicPrefix: k.TopicPrefix, GroupPrefix: k.GroupPrefix, Generations: k.Generations}
}

// validateGenerations checks kafka.generations: streams of the catalogue,
// generations from 1.
func (c *Config) validateGenerations() []error {
	var errs []error
	for stream, n := range c.Kafka.Generations {
		path := "kafka.generations." + stream
		if _, ok := c.Streams[stream]; !ok {
			errs = append(errs, fmt.Errorf("in %s: %q is not a stream of the catalogue", path, stream))
		}
		if n < 1 {
			errs = append(errs, fmt.Errorf("in %s: must be 1 (the original names) or more, got %d", path, n))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// validateNaming checks that the prefixes make names Kafka accepts: its
// topic characters, and every stream's topics within its length limit.
func (c *Config) validateNaming() []error {
	var errs []error
	for _, p := range []struct{ path, prefix string }{{"kafka.topic_prefix", c.Kafka.TopicPrefix}, {"kafka.group_prefix", c.Kafka.GroupPrefix}} {
		if err := naming.CheckPrefix(p.prefix); err != nil {
			errs = append(errs, fmt.Errorf("in %s: %w", p.path, err))
		}
	}
	// One error, for the longest topic of all: it says it for every
	// stream. Name and generation both make a topic long.
	longest, of := "", ""
	for name := range c.Streams {
		for _, topic := range c.Kafka.Naming().For(name).All() {
			if len(topic) > len(longest) {
				longest, of = topic, name
			}
		}
	}
	if len(longest) > naming.MaxTopicLength {
		errs = append(errs, fmt.Errorf("in kafka.topic_prefix: with it, stream %s has topic %s, %d characters long; Kafka accepts at most %d",
			of, longest, len(longest), naming.MaxTopicLength))
	}
	return errs
}

// warnNaming warns of a topic prefix with an underscore. Kafka's metric
// names read '.' and '_' alike, and it refuses a topic that differs from an
// existing one only there; every driftguard topic has a '.', so with an
// '_' in the prefix, team_a.presence.in and another team's
// team.a.presence.in cannot both exist.
func (c *Config) warnNaming() {
	if p := c.Kafka.TopicPrefix; strings.Contains(p, "_") {
		c.Warnings = append(c.Warnings, fmt.Sprintf("kafka.topic_prefix %q has '_' while driftguard's topic names have '.': Kafka reads them alike in metric names and refuses a topic that differs from another only there, so %spresence.in collides with %spresence.in; prefer '.' or '-'",
			p, p, strings.ReplaceAll(p, "_", ".")))
	}
}
