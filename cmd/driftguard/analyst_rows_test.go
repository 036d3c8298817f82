package main

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// Reading query results generically and comparing them with expected rows,
// for the analyst queries whose columns the test does not hard-code.

// query returns every row of sql, each cell as the driver scans its type.
func (h *history) query(sql string) [][]any {
	h.t.Helper()
	rows, err := h.conn.Query(h.ctx, sql)
	if err != nil {
		h.t.Fatalf("%v\n%s", err, sql)
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		dest := make([]any, len(rows.ColumnTypes()))
		for i, c := range rows.ColumnTypes() {
			dest[i] = reflect.New(c.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			h.t.Fatal(err)
		}
		row := make([]any, len(dest))
		for i, d := range dest {
			row[i] = reflect.ValueOf(d).Elem().Interface()
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// expect compares rows cell by cell: numbers by value (floats within a
// relative 1e-9, NaN equal to NaN), everything else as printed.
func (h *history) expect(got, want [][]any) {
	h.t.Helper()
	if !sameRows(got, want) {
		h.t.Errorf("got rows\n%s\nwant\n%s", formatRows(got), formatRows(want))
	}
}

// sameRows compares rows as expect does.
func sameRows(got, want [][]any) bool {
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = len(got[i]) == len(want[i])
		for j := 0; same && j < len(got[i]); j++ {
			same = sameCell(got[i][j], want[i][j])
		}
	}
	return same
}

func sameCell(got, want any) bool {
	g, gOK := floats(got)
	w, wOK := floats(want)
	if !gOK || !wOK {
		return fmt.Sprint(got) == fmt.Sprint(want)
	}
	return slices.EqualFunc(g, w, func(a, b float64) bool {
		return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b))
	})
}

// floats reads a number or a slice of numbers.
func floats(v any) ([]float64, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		rv = reflect.ValueOf([]any{v})
	}
	out := make([]float64, rv.Len())
	for i := range out {
		e := reflect.ValueOf(rv.Index(i).Interface())
		switch {
		case e.CanInt():
			out[i] = float64(e.Int())
		case e.CanUint():
			out[i] = float64(e.Uint())
		case e.CanFloat():
			out[i] = e.Float()
		default:
			return nil, false
		}
	}
	return out, true
}

func formatRows(rows [][]any) string {
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintln(&b, r...)
	}
	return b.String()
}

// quantile is ClickHouse's exact quantile (below 8192 values): linear
// interpolation between the two nearest ranks; NaN for no values.
func quantile(values []float64, level float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	v := slices.Sorted(slices.Values(values))
	pos := level * float64(len(v)-1)
	lo := int(pos)
	hi := min(lo+1, len(v)-1)
	return v[lo] + (v[hi]-v[lo])*(pos-float64(lo))
}
