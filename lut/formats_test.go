package lut

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/formatsdoc"
)

func jsonNames(v any) []string {
	var out []string
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
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
