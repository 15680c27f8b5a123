// Package chart lays out the dashboard's bar charts for its SVG template:
// bars, gridlines with their values, and axis labels, in viewBox units.
package chart

import (
	"math"
	"strconv"
)

// Chart is a bar chart drawn as SVG by the chart template: one bar per
// point, a few gridlines with their values, and the first, middle and last
// labels under the bars. Coordinates are in the SVG's viewBox.
type Chart struct {
	Title string
	// PartLabel names the part of each bar drawn in the second colour
	// (high-risk clicks of clicks); "" when bars have no part.
	PartLabel string
	Width     float64
	Height    float64
	Bars      []bar
	Grid      []gridline
	Labels    []axisLabel
	Empty     bool // every value is 0
	// Where the plot starts, where gridline values and the labels go.
	PlotLeft, GridLabelX, LabelY float64
}

type bar struct {
	X, Y, W, H float64
	PartY      float64 // the part's top; it ends where the bar does
	PartH      float64
	Tip        string // shown on hover (SVG <title>)
}

type gridline struct {
	Y     float64
	Label string
}

type axisLabel struct {
	X      float64
	Label  string
	Anchor string // start, middle or end: the first and last stay inside the chart
}

// Point is one value of a chart.
type Point struct {
	Label string // under the bar
	Value float64
	Part  float64 // of Value, drawn in the second colour
	Tip   string
}

// New lays out the points; format writes a value for the gridlines.
func New(title string, points []Point, format func(float64) string) Chart {
	const (
		width, height = 720, 240
		right         = 8.0
		top, bottom   = 12.0, 28.0
		// A character of a gridline's value at most, in the viewBox's
		// units: the axis font is 24 units on a phone (app.css).
		charWidth = 15.0
	)
	top0 := 0.0
	for _, p := range points {
		top0 = math.Max(top0, p.Value)
	}
	scaleTop := niceCeil(top0)
	plotH := height - top - bottom
	var grid []gridline
	longest := 0
	for i := 0; i <= 4; i++ {
		v := scaleTop * float64(i) / 4
		grid = append(grid, gridline{Y: height - bottom - plotH*float64(i)/4, Label: format(v)})
		longest = max(longest, len(grid[i].Label))
	}
	// The plot starts where the longest value ends, so none is cut off.
	left := math.Max(40, charWidth*float64(longest)+12)
	c := Chart{Title: title, Width: width, Height: height, PlotLeft: left, GridLabelX: left - 8, LabelY: height - 8,
		Grid: grid, Empty: top0 == 0}
	if len(points) == 0 {
		return c
	}
	slot := (width - left - right) / float64(len(points))
	for i, p := range points {
		h, ph := 0.0, 0.0
		if scaleTop > 0 {
			h, ph = plotH*p.Value/scaleTop, plotH*p.Part/scaleTop
		}
		x := left + slot*float64(i)
		c.Bars = append(c.Bars, bar{X: x + slot*0.15, Y: height - bottom - h, W: slot * 0.7, H: h,
			PartY: height - bottom - ph, PartH: ph, Tip: p.Tip})
	}
	for n, i := range []int{0, len(points) / 2, len(points) - 1} {
		if len(c.Labels) > 0 && c.Labels[len(c.Labels)-1].Label == points[i].Label {
			continue
		}
		l := axisLabel{X: left + slot*(float64(i)+0.5), Label: points[i].Label, Anchor: "middle"}
		switch n {
		case 0:
			l.X, l.Anchor = left, "start"
		case 2:
			l.X, l.Anchor = width-right, "end"
		}
		c.Labels = append(c.Labels, l)
	}
	return c
}

// Compact writes a gridline's value briefly: 950, 2.5, 12.5k, 1.25M.
func Compact(v float64) string {
	for _, u := range []struct {
		size   float64
		suffix string
	}{{1e9, "B"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= u.size {
			return strconv.FormatFloat(math.Round(v/u.size*100)/100, 'f', -1, 64) + u.suffix
		}
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 4, so
// that four gridlines have whole values).
func niceCeil(v float64) float64 {
	if v <= 4 {
		return 4
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
