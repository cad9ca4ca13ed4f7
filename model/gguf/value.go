package gguf

import (
	"fmt"
	"math"
	"reflect"
)

// Value is a metadata value: a scalar (uint8 … float64, bool, string held
// as the Go type of the same name) or an array (Type TypeArray, Elem the
// element type, held as a Go slice of that type; nested arrays as []Value).
type Value struct {
	Type ValueType
	Elem ValueType
	v    any
}

// Any returns the Go value.
func (v Value) Any() any { return v.v }

// String formats the value, abbreviating long arrays.
func (v Value) String() string {
	if v.Type == TypeArray {
		rv := reflect.ValueOf(v.v)
		if rv.Kind() == reflect.Slice && rv.Len() > 8 {
			return fmt.Sprintf("[%d %s values]", rv.Len(), v.Elem)
		}
	}
	if s, ok := v.v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v.v)
}

// Int returns an integer value of any integer type.
func (v Value) Int() (int64, bool) {
	switch rv := reflect.ValueOf(v.v); rv.Kind() {
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if x := rv.Uint(); x <= math.MaxInt64 {
			return int64(x), true
		}
	}
	return 0, false
}

// Uint returns a non-negative integer value of any integer type.
func (v Value) Uint() (uint64, bool) {
	if x, ok := v.v.(uint64); ok {
		return x, true
	}
	i, ok := v.Int()
	if !ok || i < 0 {
		return 0, false
	}
	return uint64(i), true
}

// Float returns a float32 or float64 value.
func (v Value) Float() (float64, bool) {
	switch x := v.v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// Bool returns a bool value.
func (v Value) Bool() (bool, bool) {
	b, ok := v.v.(bool)
	return b, ok
}

// Str returns a string value.
func (v Value) Str() (string, bool) {
	s, ok := v.v.(string)
	return s, ok
}

// Strings returns an array of strings.
func (v Value) Strings() ([]string, bool) {
	s, ok := v.v.([]string)
	return s, ok
}

// Ints returns an array of any integer type as int64s.
func (v Value) Ints() ([]int64, bool) {
	if v.Type != TypeArray {
		return nil, false
	}
	rv := reflect.ValueOf(v.v)
	if rv.Kind() != reflect.Slice {
		return nil, false
	}
	out := make([]int64, rv.Len())
	for i := range out {
		e := Value{v: rv.Index(i).Interface()}
		x, ok := e.Int()
		if !ok {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}

// Value constructors, for writing.

// Uint32 is a uint32 value.
func Uint32(x uint32) Value { return Value{Type: TypeUint32, v: x} }

// Int32 is an int32 value.
func Int32(x int32) Value { return Value{Type: TypeInt32, v: x} }

// Uint64 is a uint64 value.
func Uint64(x uint64) Value { return Value{Type: TypeUint64, v: x} }

// Float32 is a float32 value.
func Float32(x float32) Value { return Value{Type: TypeFloat32, v: x} }

// Bool is a bool value.
func Bool(x bool) Value { return Value{Type: TypeBool, v: x} }

// String is a string value.
func String(x string) Value { return Value{Type: TypeString, v: x} }

// Strings is an array of strings.
func Strings(x []string) Value { return Value{Type: TypeArray, Elem: TypeString, v: x} }

// Int32s is an array of int32s.
func Int32s(x []int32) Value { return Value{Type: TypeArray, Elem: TypeInt32, v: x} }

// Float32s is an array of float32s.
func Float32s(x []float32) Value { return Value{Type: TypeArray, Elem: TypeFloat32, v: x} }

// Equal reports whether two values have the same types and contents.
func (v Value) Equal(w Value) bool {
	return v.Type == w.Type && v.Elem == w.Elem && reflect.DeepEqual(v.v, w.v)
}
