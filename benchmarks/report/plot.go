package report

import (
	"image/color"
	"maps"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plots are the PNG files written, by what they show, relative to the
// results folder.
type Plots struct {
	Throughput, Latency, CPU string
}

// drawPlots draws the passing contenders' figures beside base.
func drawPlots(base string, sums []Summary) (Plots, error) {
	var ok []Summary
	for _, s := range sums {
		if s.OK() {
			ok = append(ok, s)
		}
	}
	var p Plots
	if len(ok) == 0 {
		return p, nil
	}
	names := make([]string, len(ok))
	for i, s := range ok {
		names[i] = s.Contender
	}
	width := vg.Length(max(6, 1.6*float64(len(ok)))) * vg.Inch

	// Throughput, with the range over rounds.
	tp := plot.New()
	tp.Title.Text = "Sustained webhooks/s (median, range over rounds)"
	tp.Y.Label.Text = "webhooks/s"
	vals := make(plotter.Values, len(ok))
	errs := make(rangeBars, len(ok))
	for i, s := range ok {
		vals[i] = s.PerSecond.Median
		errs[i] = [3]float64{s.PerSecond.Median, s.PerSecond.Min, s.PerSecond.Max}
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return p, err
	}
	bars.Color = plotutil.Color(0)
	eb, err := plotter.NewYErrorBars(errs)
	if err != nil {
		return p, err
	}
	tp.Add(bars, eb)
	tp.NominalX(names...)
	tp.Y.Min = 0
	for _, e := range errs {
		tp.Y.Max = max(tp.Y.Max, 1.15*e[2])
	}
	p.Throughput = base + "-throughput.png"
	if err := tp.Save(width, 4*vg.Inch, p.Throughput); err != nil {
		return p, err
	}

	// Latency percentiles, log scale: an ack takes milliseconds, a row in
	// ClickHouse about a batch period.
	lp := plot.New()
	lp.Title.Text = "Latency percentiles, ms (median over rounds)"
	lp.Y.Label.Text = "ms (log scale)"
	lp.Y.Scale = plot.LogScale{}
	lp.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	kinds := latencyKinds(ok)
	var labels []string
	for _, k := range kinds {
		labels = append(labels, k+" p50", k+" p99")
	}
	for i, s := range ok {
		var pts plotter.XYs
		for j, k := range kinds {
			l, found := s.Latency[k]
			if !found {
				continue
			}
			for n, v := range []float64{l.P50.Median, l.P99.Median} {
				if v > 0 && !math.IsNaN(v) {
					pts = append(pts, plotter.XY{X: float64(2*j + n), Y: v})
				}
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return p, err
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		lp.Add(line, points)
		lp.Legend.Add(s.Contender, line, points)
	}
	lp.NominalX(labels...)
	lp.Legend.Top, lp.Legend.Left = true, true
	p.Latency = base + "-latency.png"
	if err := lp.Save(8*vg.Inch, 4.5*vg.Inch, p.Latency); err != nil {
		return p, err
	}

	// CPU per webhook, stacked by process.
	cp := plot.New()
	cp.Title.Text = "CPU µs per webhook by process (median over rounds)"
	cp.Y.Label.Text = "CPU µs per webhook"
	procs := map[string]bool{}
	for _, s := range ok {
		for name := range s.CPU {
			procs[name] = true
		}
	}
	var below *plotter.BarChart
	tops := make([]float64, len(ok))
	for i, name := range sortProcesses(slices.Collect(maps.Keys(procs))) {
		v := make(plotter.Values, len(ok))
		for j, s := range ok {
			if c, found := s.CPU[name]; found && !math.IsNaN(c.Median) {
				v[j] = c.Median
				tops[j] += c.Median
			}
		}
		b, err := plotter.NewBarChart(v, vg.Points(40))
		if err != nil {
			return p, err
		}
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		cp.Add(b)
		cp.Legend.Add(name, b)
		below = b
	}
	cp.NominalX(names...)
	cp.Legend.Top = true
	// Room above the bars for the legend.
	cp.Y.Min, cp.Y.Max = 0, 1.5*slices.Max(tops)
	p.CPU = base + "-cpu.png"
	return p, cp.Save(width, 4.5*vg.Inch, p.CPU)
}

// palette has a colour for each process a contender may have.
var palette = []color.Color{
	color.RGBA{R: 0x4e, G: 0x79, B: 0xa7, A: 0xff}, color.RGBA{R: 0xf2, G: 0x8e, B: 0x2b, A: 0xff},
	color.RGBA{R: 0xe1, G: 0x57, B: 0x59, A: 0xff}, color.RGBA{R: 0x76, G: 0xb7, B: 0xb2, A: 0xff},
	color.RGBA{R: 0x59, G: 0xa1, B: 0x4f, A: 0xff}, color.RGBA{R: 0xed, G: 0xc9, B: 0x48, A: 0xff},
	color.RGBA{R: 0xb0, G: 0x7a, B: 0xa1, A: 0xff}, color.RGBA{R: 0xff, G: 0x9d, B: 0xa7, A: 0xff},
	color.RGBA{R: 0x9c, G: 0x75, B: 0x5f, A: 0xff}, color.RGBA{R: 0xba, G: 0xb0, B: 0xac, A: 0xff},
}

// rangeBars are bars' medians with their ranges: X is the bar's index.
type rangeBars [][3]float64

func (r rangeBars) Len() int                        { return len(r) }
func (r rangeBars) XY(i int) (float64, float64)     { return float64(i), r[i][0] }
func (r rangeBars) YError(i int) (float64, float64) { return r[i][0] - r[i][1], r[i][2] - r[i][0] }
