package schemacheck

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
)

// Stream validates the events of one stream as every writer to its
// `<stream>.in` must: the schema of the event's type, then the catalogue
// fields (key, event id, version) the processors order by. The ingest edge
// validates webhooks with it, the bridge its clients' sends, so the two
// accept and refuse alike.
type Stream struct {
	cfg *config.Stream
	// schemas are the stream's compiled schemas by event type.
	schemas map[string]eventSchema
}

// eventSchema is an event type's schema and, when the schema has one, its
// fast validity test; the library still validates what the checker
// rejects, for its errors.
type eventSchema struct {
	schema  *jsonschema.Schema
	checker *Checker
}

// ForStream compiles every schema of stream s; an error names the
// schema's config path.
func ForStream(s *config.Stream) (*Stream, error) {
	v := &Stream{cfg: s, schemas: map[string]eventSchema{}}
	for typ := range s.Schemas {
		if record.IsReservedType(typ) {
			// The type of operator actions: no writer may produce it.
			return nil, fmt.Errorf("in streams.%s.schemas.%s: event types starting with %q are reserved", s.Name, typ, record.ReservedTypePrefix)
		}
		sch, err := compileStreamSchema(s, typ)
		if err != nil {
			return nil, fmt.Errorf("in streams.%s.schemas.%s: %w", s.Name, typ, err)
		}
		v.schemas[typ] = eventSchema{schema: sch, checker: Compile(sch)}
	}
	return v, nil
}

func compileStreamSchema(s *config.Stream, eventType string) (*jsonschema.Schema, error) {
	data, err := s.SchemaBytes(eventType)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	url := "driftguard:///" + s.Name + "/" + eventType + ".json"
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// Validate checks the schema of the event's type, then extracts the
// catalogue fields, returning every problem with its JSON pointer.
// deliveryID is the event id when the body has none.
func (v *Stream) Validate(doc *envelope.Document, deliveryID string) (envelope.Fields, []problem.Field) {
	typ, err := doc.EventType(v.cfg)
	if err != nil {
		return envelope.Fields{}, FieldProblems(err)
	}
	sch, ok := v.schemas[typ]
	if !ok {
		return envelope.Fields{}, []problem.Field{{Pointer: v.cfg.Type.Field, Detail: fmt.Sprintf("unknown event type %q", typ)}}
	}
	if sch.checker == nil || !sch.checker.Valid(doc.Root()) {
		// The library reads the generic tree, built only on this path.
		if err := sch.schema.Validate(doc.Root().Any()); err != nil {
			return envelope.Fields{}, schemaProblems(err)
		}
	}
	// Schema-valid can still be unusable for ordering, e.g. a version over 2^63.
	fields, err := doc.ExtractTyped(v.cfg, typ, deliveryID)
	if err != nil {
		return fields, FieldProblems(err)
	}
	return fields, nil
}

// FieldProblems locates err, a body's decoding or extraction error, by
// its JSON pointer when it has one.
func FieldProblems(err error) []problem.Field {
	var fe *envelope.FieldError
	if errors.As(err, &fe) {
		return []problem.Field{{Pointer: fe.Pointer, Detail: fe.Problem}}
	}
	return []problem.Field{{Detail: err.Error()}}
}

func schemaProblems(err error) []problem.Field {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []problem.Field{{Detail: err.Error()}}
	}
	var out []problem.Field
	for _, unit := range ve.BasicOutput().Errors {
		if unit.Error == nil {
			continue
		}
		// A missing property is located where it should be, not at its
		// parent, so a client can point at the field.
		if req, ok := unit.Error.Kind.(*kind.Required); ok {
			for _, name := range req.Missing {
				out = append(out, problem.Field{Pointer: unit.InstanceLocation + "/" + envelope.EscapePointer(name), Detail: "missing required property"})
			}
			continue
		}
		out = append(out, problem.Field{Pointer: unit.InstanceLocation, Detail: unit.Error.String()})
	}
	if len(out) == 0 {
		out = append(out, problem.Field{Detail: ve.Error()})
	}
	return out
}
