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

// TestTableFieldsDocumented holds table.json's fields (the table's, then a
// bin's) to docs/formats.md.
func TestTableFieldsDocumented(t *testing.T) {
	names, _, err := formatsdoc.Fields("../docs/formats.md", "table.json")
	if err != nil {
		t.Fatal(err)
	}
	want := append(jsonNames(Table{}), jsonNames(Bin{})...)
	if !slices.Equal(names, want) {
		t.Errorf("docs/formats.md lists %v, the table has %v", names, want)
	}
}
