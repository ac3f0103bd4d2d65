package proto

import (
	"fmt"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// The presence rules the v2 decoder does not enforce (it zeroes a Go value
// on null and leaves absent members alone) are checked by a streaming walk
// over the raw frame, driven by a schema derived once from the struct tags
// in frames.go:
//
//   - a member without omitempty/omitzero is required;
//   - a pointer member without omitempty/omitzero is required but nullable
//     (only Deployment.ServingGeneration); every other null is refused;
//   - an omitempty member present as "", [] or {}, or an omitzero member
//     present as false or 0, is refused (Encode never writes one);
//   - a member not in the struct is unknown (names match case-sensitively).
//
// Kind mismatches (a string where an object belongs, …) are skipped here
// and reported by the v2 decoder as ErrKind.

type schemaKind uint8

const (
	kindScalar schemaKind = iota
	kindStruct
	kindMap
	kindSlice
)

type schema struct {
	kind     schemaKind
	fields   []schemaField  // kindStruct
	byName   map[string]int // kindStruct
	required uint64         // kindStruct: bit i set when fields[i] is required
	elem     *schema        // kindMap, kindSlice
}

type schemaField struct {
	name      string
	required  bool
	nullable  bool
	omitEmpty bool
	omitZero  bool
	s         *schema
}

var timeType = reflect.TypeFor[time.Time]()

// schemaOf derives the schema of t; it panics on a struct it cannot
// describe (a programming error caught by the package's tests at init).
func schemaOf(t reflect.Type) *schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return &schema{kind: kindScalar}
	case t.Kind() == reflect.Struct:
		return structSchema(t)
	case t.Kind() == reflect.Map:
		return &schema{kind: kindMap, elem: schemaOf(t.Elem())}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return &schema{kind: kindScalar} // []byte is a base64 string
	case t.Kind() == reflect.Slice:
		return &schema{kind: kindSlice, elem: schemaOf(t.Elem())}
	default:
		return &schema{kind: kindScalar}
	}
}

func structSchema(t reflect.Type) *schema {
	s := &schema{kind: kindStruct, byName: map[string]int{}}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		if sf.Anonymous {
			panic(fmt.Sprintf("proto: embedded field %s.%s is not supported", t.Name(), sf.Name))
		}
		tag, ok := sf.Tag.Lookup("json")
		if !ok || tag == "-" {
			panic(fmt.Sprintf("proto: field %s.%s has no json tag", t.Name(), sf.Name))
		}
		name, opts, _ := strings.Cut(tag, ",")
		f := schemaField{name: name, s: schemaOf(sf.Type)}
		for o := range strings.SplitSeq(opts, ",") {
			switch o {
			case "omitempty":
				f.omitEmpty = true
			case "omitzero":
				f.omitZero = true
			case "":
			default:
				panic(fmt.Sprintf("proto: field %s.%s has unsupported json option %q", t.Name(), sf.Name, o))
			}
		}
		f.required = !f.omitEmpty && !f.omitZero
		f.nullable = f.required && sf.Type.Kind() == reflect.Pointer
		idx := len(s.fields)
		if idx >= 64 {
			panic("proto: struct with more than 64 members")
		}
		if _, dup := s.byName[name]; dup {
			panic(fmt.Sprintf("proto: %s has member %q twice", t.Name(), name))
		}
		s.byName[name] = idx
		if f.required {
			s.required |= 1 << idx
		}
		s.fields = append(s.fields, f)
	}
	return s
}

// field returns the index of the member called name, and true; a short
// struct is searched in order, which is cheaper than hashing the name.
func (s *schema) field(name []byte) (int, bool) {
	if len(s.fields) > 12 {
		i, ok := s.byName[string(name)]
		return i, ok
	}
	for i := range s.fields {
		if s.fields[i].name == string(name) {
			return i, true
		}
	}
	return 0, false
}

// frameSchemas are the schemas of the eight frames by type name.
var frameSchemas = map[string]*schema{
	TypeHello:        schemaOf(reflect.TypeFor[Hello]()),
	TypeWelcome:      schemaOf(reflect.TypeFor[Welcome]()),
	TypeHeartbeat:    schemaOf(reflect.TypeFor[Heartbeat]()),
	TypeHeartbeatAck: schemaOf(reflect.TypeFor[HeartbeatAck]()),
	TypeRequest:      schemaOf(reflect.TypeFor[Request]()),
	TypeResponse:     schemaOf(reflect.TypeFor[Response]()),
	TypeRetention:    schemaOf(reflect.TypeFor[Retention]()),
	TypeRetentionAck: schemaOf(reflect.TypeFor[RetentionAck]()),
}

// walker checks one frame against its schema with a jsontext decoder,
// keeping the JSON pointer of the current position in ptr.
type walker struct {
	d    *jsontext.Decoder
	ptr  []byte
	name []byte // scratch for unescaping member names
}

func (w *walker) fail(rule error, detail string) error {
	return newError(rule, string(w.ptr), detail)
}

// readName reads an object member name and returns it unescaped; the
// result is valid until the next read.
func (w *walker) readName() ([]byte, error) {
	v, err := w.d.ReadValue()
	if err != nil {
		return nil, tokenError(err)
	}
	raw := v[1 : len(v)-1]
	for _, c := range raw {
		if c == '\\' {
			w.name, err = jsontext.AppendUnquote(w.name[:0], v)
			if err != nil {
				return nil, tokenError(err)
			}
			return w.name, nil
		}
	}
	return raw, nil
}

// value checks the next value against s; f describes the member holding it
// (nil for array elements and map values, which are required and not
// nullable).
func (w *walker) value(s *schema, f *schemaField) error {
	k := w.d.PeekKind()
	switch k {
	case 'n':
		if f == nil || !f.nullable {
			return w.fail(ErrNull, "null is not allowed here")
		}
		_, err := w.d.ReadToken()
		return tokenError(err)
	case '{':
		switch s.kind {
		case kindStruct:
			return w.object(s, f)
		case kindMap:
			return w.mapValue(s, f)
		}
	case '[':
		if s.kind == kindSlice {
			return w.array(s, f)
		}
	case '"':
		if f != nil && f.omitEmpty {
			v, err := w.d.ReadValue()
			if err != nil {
				return tokenError(err)
			}
			if len(v) == 2 {
				return w.fail(ErrEmpty, "an empty optional member must be omitted")
			}
			return nil
		}
	case 'f', '0':
		if f != nil && f.omitZero {
			v, err := w.d.ReadValue()
			if err != nil {
				return tokenError(err)
			}
			if sv := string(v); sv == "false" || sv == "0" || sv == "-0" {
				return w.fail(ErrEmpty, "a zero optional member must be omitted")
			}
			return nil
		}
	case 0:
		_, err := w.d.ReadToken()
		return tokenError(err)
	}
	return tokenError(w.d.SkipValue())
}

func (w *walker) emptyAfterOpen(f *schemaField, end jsontext.Kind) error {
	if f != nil && f.omitEmpty && w.d.PeekKind() == end {
		return w.fail(ErrEmpty, "an empty optional member must be omitted")
	}
	return nil
}

func (w *walker) object(s *schema, f *schemaField) error {
	if _, err := w.d.ReadToken(); err != nil {
		return tokenError(err)
	}
	if err := w.emptyAfterOpen(f, '}'); err != nil {
		return err
	}
	base := len(w.ptr)
	var seen uint64
	for w.d.PeekKind() != '}' {
		name, err := w.readName()
		if err != nil {
			return err
		}
		i, ok := s.field(name)
		w.ptr = appendPointerToken(w.ptr[:base], name)
		if !ok {
			for _, sf := range s.fields {
				if strings.EqualFold(sf.name, string(name)) {
					return w.fail(ErrUnknownMember, "member names are case-sensitive; this is a case variant of a defined member")
				}
			}
			return w.fail(ErrUnknownMember, "the object defines no such member")
		}
		seen |= 1 << i
		if err := w.value(s.fields[i].s, &s.fields[i]); err != nil {
			return err
		}
		w.ptr = w.ptr[:base]
	}
	if _, err := w.d.ReadToken(); err != nil {
		return tokenError(err)
	}
	if missing := s.required &^ seen; missing != 0 {
		name := s.fields[bits.TrailingZeros64(missing)].name
		w.ptr = appendPointerToken(w.ptr[:base], []byte(name))
		return w.fail(ErrMissingMember, "a required member is absent")
	}
	return nil
}

func (w *walker) mapValue(s *schema, f *schemaField) error {
	if _, err := w.d.ReadToken(); err != nil {
		return tokenError(err)
	}
	if err := w.emptyAfterOpen(f, '}'); err != nil {
		return err
	}
	base := len(w.ptr)
	for w.d.PeekKind() != '}' {
		name, err := w.readName()
		if err != nil {
			return err
		}
		w.ptr = appendPointerToken(w.ptr[:base], name)
		if err := w.value(s.elem, nil); err != nil {
			return err
		}
		w.ptr = w.ptr[:base]
	}
	_, err := w.d.ReadToken()
	return tokenError(err)
}

func (w *walker) array(s *schema, f *schemaField) error {
	if _, err := w.d.ReadToken(); err != nil {
		return tokenError(err)
	}
	if err := w.emptyAfterOpen(f, ']'); err != nil {
		return err
	}
	base := len(w.ptr)
	for i := 0; w.d.PeekKind() != ']'; i++ {
		w.ptr = strconv.AppendInt(append(w.ptr[:base], '/'), int64(i), 10)
		if err := w.value(s.elem, nil); err != nil {
			return err
		}
		w.ptr = w.ptr[:base]
	}
	_, err := w.d.ReadToken()
	return tokenError(err)
}
