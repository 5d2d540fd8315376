// promql-shim: reads a JSON array of PromQL expressions on stdin, parses each with Prometheus's own parser and
// prints a JSON array with, per expression, the metric names it selects (or the parse error).
package main

import (
	"encoding/json"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics"`
	Error   string   `json:"error,omitempty"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		panic(err)
	}
	out := make([]result, 0, len(exprs))
	for _, e := range exprs {
		r := result{Expr: e, Metrics: []string{}}
		node, err := parser.NewParser(parser.Options{}).ParseExpr(e)
		if err != nil {
			r.Error = err.Error()
			out = append(out, r)
			continue
		}
		seen := map[string]bool{}
		parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				name := vs.Name
				for _, m := range vs.LabelMatchers {
					if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
						name = m.Value
					}
				}
				if name == "" {
					r.Error = "a selector without a metric name"
				}
				seen[name] = true
			}
			return nil
		})
		for n := range seen {
			r.Metrics = append(r.Metrics, n)
		}
		sort.Strings(r.Metrics)
		out = append(out, r)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}
