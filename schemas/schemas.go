// Package schemas embeds what driftguard ships as data: the stream catalogue,
// the JSON Schemas of each stream's events and the ClickHouse DDL. Code that
// interprets them lives elsewhere; this package only hands out the bytes.
package schemas

import "embed"

// Catalogue is the shipped stream catalogue (YAML).
//
//go:embed catalogue.yaml
var Catalogue []byte

// Files holds the JSON Schemas, addressed by the paths the catalogue names
// (for example "streams/presence.schema.json").
//
//go:embed streams/*.json
var Files embed.FS

// ClickHouse holds the versioned ClickHouse migrations, one file per version,
// named NNNN_description.sql and applied in name order.
//
//go:embed clickhouse/*.sql
var ClickHouse embed.FS
