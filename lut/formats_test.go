package lut

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/formatsdoc"
)

// jsonNames are v's JSON keys in order, an embedded struct's (the
// regime's) in its place, as encoding/json writes them.
func jsonNames(v any) []string {
	return typeJSONNames(reflect.TypeOf(v))
}

func typeJSONNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, typeJSONNames(f.Type)...)
		} else if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// TestTableFieldsDocumented holds table.json's fields (the table's, a bin's,
// the calibration's, a bin calibration's, a trial's, and v3's class,
// choice, setting and point) to docs/formats.md.
func TestTableFieldsDocumented(t *testing.T) {
	names, _, err := formatsdoc.Fields("../docs/formats.md", "table.json")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, v := range []any{Table{}, Bin{}, Calibration{}, BinCalibration{}, Trial{}, Class{}, Choice{}, Setting{}, Point{}} {
		want = append(want, jsonNames(v)...)
	}
	if !slices.Equal(names, want) {
		t.Errorf("docs/formats.md lists %v, the table has %v", names, want)
	}
}
