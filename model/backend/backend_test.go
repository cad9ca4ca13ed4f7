package backend

import (
	"fmt"
	"testing"
)

func TestEnumNamesAndTheFallback(t *testing.T) {
	for _, tc := range []struct {
		v    fmt.Stringer
		want string
	}{
		{F32, "F32"}, {F16, "F16"}, {BF16, "BF16"}, {DType(7), "DType(7)"},
		{Q4_0, "Q4_0"}, {Q8_0, "Q8_0"}, {Q6_K, "Q6_K"}, {Q5_1, "Q5_1"}, {QuantType(4), "QuantType(4)"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%s, want %s", got, tc.want)
		}
	}
}
