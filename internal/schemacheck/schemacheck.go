// Package schemacheck answers "is this document valid?" for a compiled JSON
// Schema much faster than the general validator, so the ingest edge can
// validate every webhook without spending most of its time there.
//
// It is an accelerator, not a second validator: santhosh-tekuri/jsonschema
// parses, resolves and compiles the schema, and the edge still asks it for
// the errors of any document the checker rejects. The checker reads the
// compiled keywords and implements the ones webhook schemas use (type,
// enum, const, properties, required, additionalProperties, min/max
// properties, items, min/max items, min/max length, pattern, minimum,
// maximum and their exclusive forms). A schema that uses any other keyword
// anywhere gets no checker, and is validated by the library alone. Its
// verdicts are tested against the library's on generated documents.
//
// Stream (stream.go) validates a stream's events with both, the same way
// for every writer of `<stream>.in`: the ingest edge and the bridge.
package schemacheck

import (
	"math"
	"math/big"
	"slices"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/driftguard/driftguard/internal/envelope"
)

// Checker is a compiled schema's fast validity test.
type Checker struct {
	root *node
}

// Compile returns the checker of sch, or nil when sch uses a keyword the
// checker does not implement.
func Compile(sch *jsonschema.Schema) *Checker {
	n, ok := compile(sch)
	if !ok {
		return nil
	}
	return &Checker{root: n}
}

// Valid reports whether v, a value of a body envelope.Parse read, satisfies
// the schema. It reads the flat document as it is, so a valid body costs
// no tree: the library's tree is built only for a body the checker refuses.
func (c *Checker) Valid(v envelope.Value) bool { return c.root.valid(v) }

// jsonType is a bit per JSON type, as in the `type` keyword.
type jsonType uint8

const (
	typeNull jsonType = 1 << iota
	typeBoolean
	typeNumber
	typeInteger
	typeString
	typeArray
	typeObject
)

var typeNames = map[string]jsonType{
	"null": typeNull, "boolean": typeBoolean, "number": typeNumber, "integer": typeInteger,
	"string": typeString, "array": typeArray, "object": typeObject,
}

// node is one schema, reduced to the keywords the checker implements.
type node struct {
	// never is the false schema; the true schema is a node with nothing set.
	never bool
	types jsonType

	hasConst bool
	constant any
	hasEnum  bool
	enum     []any

	// members are the properties and the required names, so one lookup
	// per member of a document answers both; memberNames lists their
	// names, in the same order, for the lookup.
	members     []member
	memberNames []string
	// additional validates members not named in properties; nil allows any.
	additional *node
	// required counts the distinct required names: a document has no
	// duplicate keys, so counting the required members it has is enough.
	required     int
	minMembers   int
	maxMembers   int
	items        *node
	minItems     int
	maxItems     int
	minLength    int
	maxLength    int
	pattern      jsonschema.Regexp
	minimum      *bound
	maximum      *bound
	exclusiveMin *bound
	exclusiveMax *bound
}

// maxScannedMembers bounds the member names a schema may have for the
// checker, which finds a document's member among them by scanning: for the
// few names of a webhook schema, faster than hashing it. A schema with more
// is left to the library.
const maxScannedMembers = 64

// member is what a schema says of one member name.
type member struct {
	// node validates the member; nil when properties does not name it.
	node     *node
	required bool
}

// unlimited marks a max* keyword that is absent.
const unlimited = math.MaxInt

// bound is a numeric keyword's value, with an int64 copy when it has one,
// so integer instances compare without big.Rat.
type bound struct {
	rat    *big.Rat
	int    int64
	hasInt bool
}

func newBound(r *big.Rat) *bound {
	if r == nil {
		return nil
	}
	b := &bound{rat: r}
	if r.IsInt() && r.Num().IsInt64() {
		b.int, b.hasInt = r.Num().Int64(), true
	}
	return b
}

// boolean is the schema `true` (anything is valid) or `false` (nothing is).
func boolean(accept bool) *node {
	return &node{never: !accept, maxMembers: unlimited, maxItems: unlimited, maxLength: unlimited}
}

// compile reduces sch, or reports false when it uses a keyword outside
// the implemented set.
func compile(sch *jsonschema.Schema) (*node, bool) {
	if sch == nil {
		return nil, true
	}
	if sch.Bool != nil {
		return boolean(*sch.Bool), true
	}
	if !onlyImplemented(sch) {
		return nil, false
	}
	n := &node{
		minMembers: intOr(sch.MinProperties, 0), maxMembers: intOr(sch.MaxProperties, unlimited),
		minItems: intOr(sch.MinItems, 0), maxItems: intOr(sch.MaxItems, unlimited),
		minLength: intOr(sch.MinLength, 0), maxLength: intOr(sch.MaxLength, unlimited),
		pattern: sch.Pattern,
		minimum: newBound(sch.Minimum), maximum: newBound(sch.Maximum),
		exclusiveMin: newBound(sch.ExclusiveMinimum), exclusiveMax: newBound(sch.ExclusiveMaximum),
	}
	if sch.Types != nil {
		for _, name := range sch.Types.ToStrings() {
			n.types |= typeNames[name]
		}
	}
	if sch.Const != nil {
		if !comparable(*sch.Const) {
			return nil, false
		}
		n.hasConst, n.constant = true, *sch.Const
	}
	if sch.Enum != nil {
		for _, v := range sch.Enum.Values {
			if !comparable(v) {
				return nil, false
			}
		}
		n.hasEnum, n.enum = true, sch.Enum.Values
	}
	for name, sub := range sch.Properties {
		c, ok := compile(sub)
		if !ok {
			return nil, false
		}
		n.memberNames = append(n.memberNames, name)
		n.members = append(n.members, member{node: c})
	}
	for _, name := range sch.Required {
		i := slices.Index(n.memberNames, name)
		if i < 0 {
			i = len(n.members)
			n.memberNames = append(n.memberNames, name)
			n.members = append(n.members, member{})
		}
		if !n.members[i].required {
			n.members[i].required = true
			n.required++
		}
	}
	if len(n.members) > maxScannedMembers {
		return nil, false
	}
	switch additional := sch.AdditionalProperties.(type) {
	case nil:
	case bool:
		if !additional {
			n.additional = boolean(false)
		}
	case *jsonschema.Schema:
		c, ok := compile(additional)
		if !ok {
			return nil, false
		}
		n.additional = c
	default:
		return nil, false
	}
	items := sch.Items2020
	switch legacy := sch.Items.(type) {
	case nil:
	case *jsonschema.Schema:
		items = legacy
	default:
		return nil, false
	}
	if items != nil {
		c, ok := compile(items)
		if !ok {
			return nil, false
		}
		n.items = c
	}
	return n, true
}

// onlyImplemented reports whether sch sets no keyword but the implemented
// ones (annotations such as title are ignored, as validation ignores them).
func onlyImplemented(s *jsonschema.Schema) bool {
	return s.Ref == nil && s.RecursiveRef == nil && s.DynamicRef == nil &&
		s.Not == nil && s.AllOf == nil && s.AnyOf == nil && s.OneOf == nil &&
		s.If == nil && s.Then == nil && s.Else == nil && s.Format == nil &&
		s.PropertyNames == nil && len(s.PatternProperties) == 0 &&
		len(s.Dependencies) == 0 && len(s.DependentRequired) == 0 && len(s.DependentSchemas) == 0 &&
		s.UnevaluatedProperties == nil && s.UnevaluatedItems == nil &&
		!s.UniqueItems && s.Contains == nil && s.MinContains == nil && s.MaxContains == nil &&
		s.AdditionalItems == nil && len(s.PrefixItems) == 0 &&
		s.ContentEncoding == nil && s.ContentMediaType == nil && s.ContentSchema == nil &&
		s.MultipleOf == nil && len(s.Extensions) == 0
}

// comparable reports whether an enum or const value is one the checker
// compares itself: strings, booleans and null. Numbers compare by value
// and containers deeply, which is left to the library.
func comparable(v any) bool {
	switch v.(type) {
	case nil, bool, string:
		return true
	}
	return false
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

func (n *node) valid(v envelope.Value) bool {
	if n.never {
		return false
	}
	var t jsonType
	switch v.Kind() {
	case envelope.KindNull:
		t = typeNull
	case envelope.KindBool:
		t = typeBoolean
	case envelope.KindString:
		t = typeString
		if !n.validString(v.Text()) {
			return false
		}
	case envelope.KindNumber:
		t = typeNumber
		num := number{value: v}
		if !n.validNumber(&num) {
			return false
		}
		if n.types&typeInteger != 0 && n.types&typeNumber == 0 && !num.isInteger() {
			return false
		}
	case envelope.KindArray:
		t = typeArray
		if !n.validArray(v) {
			return false
		}
	case envelope.KindObject:
		t = typeObject
		if !n.validObject(v) {
			return false
		}
	default:
		return false
	}
	// An integer is a number, so "integer" admits numbers, checked above.
	if n.types != 0 && n.types&t == 0 && (t != typeNumber || n.types&typeInteger == 0) {
		return false
	}
	if n.hasConst && !sameScalar(v, n.constant) {
		return false
	}
	if n.hasEnum {
		for _, want := range n.enum {
			if sameScalar(v, want) {
				return true
			}
		}
		return false
	}
	return true
}

// sameScalar compares v with a string, boolean or null.
func sameScalar(v envelope.Value, want any) bool {
	switch want := want.(type) {
	case nil:
		return v.Kind() == envelope.KindNull
	case bool:
		return v.Kind() == envelope.KindBool && v.Bool() == want
	case string:
		return v.Kind() == envelope.KindString && v.Text() == want
	}
	return false
}

func (n *node) validString(s string) bool {
	// JSON Schema counts code points, not bytes. A string has no more
	// code points than bytes and no fewer than a quarter of them, which
	// settles most lengths without counting.
	if (n.minLength > 0 || n.maxLength != unlimited) && (len(s) > n.maxLength || (len(s)+3)/4 < n.minLength) {
		if length := utf8.RuneCountInString(s); length < n.minLength || length > n.maxLength {
			return false
		}
	}
	return n.pattern == nil || n.pattern.MatchString(s)
}

func (n *node) validArray(arr envelope.Value) bool {
	if arr.Len() < n.minItems || arr.Len() > n.maxItems {
		return false
	}
	if n.items != nil {
		for item := range arr.Items() {
			if !n.items.valid(item) {
				return false
			}
		}
	}
	return true
}

func (n *node) validObject(obj envelope.Value) bool {
	if obj.Len() < n.minMembers || obj.Len() > n.maxMembers {
		return false
	}
	required := 0
	for name, value := range obj.Members() {
		var m member
		if i := slices.Index(n.memberNames, name); i >= 0 {
			m = n.members[i]
		}
		if m.required {
			required++
		}
		sub := m.node
		if sub == nil {
			sub = n.additional
		}
		if sub != nil && !sub.valid(value) {
			return false
		}
	}
	return required == n.required
}

func (n *node) validNumber(num *number) bool {
	if n.minimum == nil && n.maximum == nil && n.exclusiveMin == nil && n.exclusiveMax == nil {
		return true
	}
	return (n.minimum == nil || num.cmp(n.minimum) >= 0) &&
		(n.maximum == nil || num.cmp(n.maximum) <= 0) &&
		(n.exclusiveMin == nil || num.cmp(n.exclusiveMin) > 0) &&
		(n.exclusiveMax == nil || num.cmp(n.exclusiveMax) < 0)
}

// number is a JSON number, parsed at most once into each form.
type number struct {
	value   envelope.Value
	int     int64
	intDone bool
	intOK   bool
	rat     *big.Rat
}

// integer parses the number as an integer literal, once.
func (x *number) integer() (int64, bool) {
	if !x.intDone {
		x.intDone = true
		x.int, x.intOK = x.value.Int()
	}
	return x.int, x.intOK
}

func (x *number) cmp(b *bound) int {
	if _, ok := x.integer(); ok && b.hasInt {
		switch {
		case x.int < b.int:
			return -1
		case x.int > b.int:
			return 1
		}
		return 0
	}
	return x.exact().Cmp(b.rat)
}

// exact parses the number as a rational, once.
func (x *number) exact() *big.Rat {
	if x.rat == nil {
		x.rat = new(big.Rat)
		if _, ok := x.rat.SetString(x.value.Text()); !ok {
			// Not reachable for a literal the strict decoder accepted;
			// read as zero rather than panic.
			x.rat.SetInt64(0)
		}
	}
	return x.rat
}

// isInteger reports whether the number's value is an integer, as the
// `integer` type means it: 1.0 and 1e2 are integers.
func (x *number) isInteger() bool {
	if _, ok := x.integer(); ok {
		return true
	}
	return x.exact().IsInt()
}
