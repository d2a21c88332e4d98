// Command promql-metrics reads a JSON array of PromQL expressions on stdin
// and writes, as a JSON object, the metric names each one selects. It uses
// Prometheus's own parser, so that test/monitoring can tell which metrics the
// alerts and the dashboard need without the main module importing
// Prometheus. An expression that does not parse is an error (exit code 1).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintf(os.Stderr, "promql-metrics: reading a JSON array of expressions: %v\n", err)
		os.Exit(1)
	}
	out, err := metricNames(exprs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "promql-metrics: %v\n", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "promql-metrics: %v\n", err)
		os.Exit(1)
	}
}

// metricNames maps each expression to the sorted names of the metrics its
// selectors select by name.
func metricNames(exprs []string) (map[string][]string, error) {
	p := parser.NewParser(parser.Options{})
	out := make(map[string][]string, len(exprs))
	for _, e := range exprs {
		ast, err := p.ParseExpr(e)
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", e, err)
		}
		names := []string{}
		parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			if vs.Name != "" {
				names = append(names, vs.Name)
				return nil
			}
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					names = append(names, m.Value)
				}
			}
			return nil
		})
		slices.Sort(names)
		out[e] = slices.Compact(names)
	}
	return out, nil
}
