// Package fields describes the JSON fields of request bodies as their Go
// types declare them: the exact name of each field, and the range of an
// integer field, written once as a struct tag next to it:
//
//	RevenueCents *int64 `json:"revenueCents" range:"0,1000000000000"`
//
// The decoder reads it to refuse a name in another case (encoding/json
// would match it) and to name the range when a number does not even fit the
// field's type; validation reads it to check the values that do.
package fields

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// Field is one JSON field of a struct.
type Field struct {
	Type reflect.Type // its Go type
	// Min and Max bound an integer field with a range tag (HasRange).
	Min, Max int64
	HasRange bool
	index    []int
}

type structFields struct {
	byName map[string]Field
	names  []string // in declaration order
}

var cache sync.Map // reflect.Type -> *structFields

// Of returns the JSON fields of struct type t (pointers followed) by their
// exact names, as encoding/json sees them: the json tag's name, or the Go
// name; "-" and unexported fields left out; untagged embedded structs
// flattened. Nil for a type that is not a struct.
func Of(t reflect.Type) map[string]Field { return of(t).byName }

func of(t reflect.Type) *structFields {
	t = deref(t)
	if t == nil || t.Kind() != reflect.Struct {
		return &structFields{}
	}
	if sf, ok := cache.Load(t); ok {
		return sf.(*structFields)
	}
	out := &structFields{byName: map[string]Field{}}
	add := func(name string, f Field) {
		if _, shadowed := out.byName[name]; !shadowed {
			out.byName[name] = f
			out.names = append(out.names, name)
		}
	}
	var embedded []int
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		switch {
		case name == "-" || !sf.IsExported() && !sf.Anonymous:
			continue
		case sf.Anonymous && name == "" && deref(sf.Type).Kind() == reflect.Struct:
			embedded = append(embedded, i) // after the outer fields, which win
			continue
		case name == "":
			name = sf.Name
		}
		f := Field{Type: sf.Type, index: []int{i}}
		if tag := sf.Tag.Get("range"); tag != "" {
			f.Min, f.Max, f.HasRange = parseRange(t, sf.Name, tag)
		}
		add(name, f)
	}
	for _, i := range embedded {
		inner := of(t.Field(i).Type)
		for _, n := range inner.names {
			f := inner.byName[n]
			f.index = append([]int{i}, f.index...)
			add(n, f)
		}
	}
	cache.Store(t, out)
	return out
}

// RangeMessage says what a value of the integer field at path must be.
func (f Field) RangeMessage(path string) string {
	return fmt.Sprintf("%s must be an integer from %d to %d.", path, f.Min, f.Max)
}

func parseRange(t reflect.Type, name, tag string) (int64, int64, bool) {
	lo, hi, ok := strings.Cut(tag, ",")
	min, err1 := strconv.ParseInt(lo, 10, 64)
	max, err2 := strconv.ParseInt(hi, 10, 64)
	if !ok || err1 != nil || err2 != nil || min > max {
		panic(fmt.Sprintf("fields: %s.%s: range tag %q is not \"min,max\"", t, name, tag))
	}
	return min, max, true
}

// Lookup finds the field at a dotted path ("caps.daily") of struct type t,
// the way encoding/json names a field in an UnmarshalTypeError.
func Lookup(t reflect.Type, path string) (Field, bool) {
	var f Field
	for _, name := range strings.Split(path, ".") {
		var ok bool
		if f, ok = Of(t)[name]; !ok {
			return Field{}, false
		}
		t = f.Type
	}
	return f, true
}

// Violation is an integer field whose value is outside its range.
type Violation struct {
	Path string // dotted, as in "caps.daily"
	Field
}

// OutOfRange lists the integer fields of v (a struct or a pointer to one,
// nested structs included) whose values are outside their range tags, in
// the order they are declared.
func OutOfRange(v any) []Violation {
	return outOfRange(reflect.ValueOf(v), "", nil)
}

func outOfRange(v reflect.Value, prefix string, out []Violation) []Violation {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return out
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return out
	}
	sf := of(v.Type())
	for _, name := range sf.names {
		f := sf.byName[name]
		fv, ok := fieldValue(v, f.index)
		switch {
		case !ok:
		case f.HasRange:
			if n := fv.Int(); n < f.Min || n > f.Max {
				out = append(out, Violation{Path: prefix + name, Field: f})
			}
		default:
			out = outOfRange(fv, prefix+name+".", out)
		}
	}
	return out
}

// fieldValue follows index through embedded structs and the field's own
// pointer; false when a pointer on the way is nil.
func fieldValue(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 {
			for v.Kind() == reflect.Pointer {
				if v.IsNil() {
					return v, false
				}
				v = v.Elem()
			}
		}
		v = v.Field(x)
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	return v, true
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}
