package profile

import (
	"slices"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/dlmcache/dlmcache/internal/formatsdoc"
)

// docType maps docs/formats.md's column types to parquet's physical types.
var docType = map[string]string{"string": "BYTE_ARRAY", "int32": "INT32", "int64": "INT64", "double": "DOUBLE", "boolean": "BOOLEAN"}

// TestParquetColumnsDocumented holds the written parquet schemas to the
// column lists of docs/formats.md: same names, same order, same types.
func TestParquetColumnsDocumented(t *testing.T) {
	for _, tc := range []struct {
		file   string
		schema *parquet.Schema
	}{
		{"similarity.parquet", parquet.SchemaOf(Record{})},
		{"bench.parquet", parquet.SchemaOf(SuiteResult{})},
	} {
		names, types, err := formatsdoc.Fields("../docs/formats.md", tc.file)
		if err != nil {
			t.Fatal(err)
		}
		var got, gotTypes, wantTypes []string
		for _, f := range tc.schema.Fields() {
			got = append(got, f.Name())
			gotTypes = append(gotTypes, f.Type().Kind().String())
		}
		for _, ty := range types {
			wantTypes = append(wantTypes, docType[ty])
		}
		if !slices.Equal(got, names) {
			t.Errorf("%s: written columns %v, docs/formats.md lists %v", tc.file, got, names)
		} else if !slices.Equal(gotTypes, wantTypes) {
			t.Errorf("%s: written types %v, docs/formats.md says %v", tc.file, gotTypes, wantTypes)
		}
	}
}
