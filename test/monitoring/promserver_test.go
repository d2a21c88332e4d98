package monitoring

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// promInterval is the test server's scrape and rule evaluation interval:
// short, so that an alert's state follows the components within seconds.
const promInterval = time.Second

// promServer is a real Prometheus server (built by `make tools` from the
// pinned module) scraping a world's components and evaluating the shipped
// alerting rules.
type promServer struct {
	api promv1.API
	url string
}

// startPrometheus writes a configuration that scrapes every metrics
// endpoint of w with the labels a ServiceMonitor gives a pod's series
// (namespace, pod, job) and loads rules, then starts Prometheus and waits
// until it is ready. It stops with the world's cluster.
func startPrometheus(ctx context.Context, t *testing.T, w *world.World, rules ruleFile) *promServer {
	t.Helper()
	bin, err := cluster.Tool("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "alerts.yaml")
	writeYAML(t, rulesPath, rules)
	writeYAML(t, filepath.Join(dir, "prometheus.yml"), scrapeConfig(w.MetricsEndpoints(), rulesPath))
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := cluster.StartProcess("prometheus", w.Cluster.LogDir(), bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=info")
	if err != nil {
		t.Fatal(err)
	}
	w.Cluster.Track(p)
	client, err := promapi.NewClient(promapi.Config{Address: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	s := &promServer{api: promv1.NewAPI(client), url: "http://" + addr}
	must(t, world.WaitHealthy(ctx, p, s.url+"/-/ready"))
	return s
}

// scrapeConfig is a Prometheus configuration with one job per component
// binary, each process a static target labelled as the Prometheus
// Operator labels a scraped pod.
func scrapeConfig(eps []world.MetricsEndpoint, rulesPath string) map[string]any {
	byJob := map[string][]map[string]any{}
	for _, ep := range eps {
		byJob[ep.Binary] = append(byJob[ep.Binary], map[string]any{
			"targets": []string{ep.Address},
			"labels":  map[string]string{"namespace": world.Namespace, "pod": ep.Process},
		})
	}
	var jobs []map[string]any
	for _, job := range slices.Sorted(maps.Keys(byJob)) {
		jobs = append(jobs, map[string]any{"job_name": job, "static_configs": byJob[job]})
	}
	return map[string]any{
		"global": map[string]any{
			"scrape_interval":     promInterval.String(),
			"scrape_timeout":      promInterval.String(),
			"evaluation_interval": promInterval.String(),
		},
		"rule_files":     []string{rulesPath},
		"scrape_configs": jobs,
	}
}

// immediate returns the rules with every alert's `for` removed: an alert
// fires at the first evaluation its expression holds. Silence is then
// judged strictly (not even a pending alert on a healthy install), and a
// failure fires within the test's seconds instead of the rules' minutes;
// expressions and labels are the shipped ones.
func immediate(f ruleFile) ruleFile {
	out := ruleFile{}
	for _, g := range f.Groups {
		g.Rules = slices.Clone(g.Rules)
		for i := range g.Rules {
			g.Rules[i].For = ""
		}
		out.Groups = append(out.Groups, g)
	}
	return out
}

// targetsUp reports whether every configured target's last scrape
// succeeded, and describes the ones that did not.
func (s *promServer) targetsUp(ctx context.Context, want int) (bool, string, error) {
	res, err := s.api.Targets(ctx)
	if err != nil {
		return false, "", err
	}
	var down []string
	for _, tg := range res.Active {
		if tg.Health != promv1.HealthGood {
			down = append(down, fmt.Sprintf("%s (%s: %s)", tg.ScrapeURL, tg.Health, tg.LastError))
		}
	}
	if len(res.Active) != want {
		return false, fmt.Sprintf("%d of %d targets known", len(res.Active), want), nil
	}
	return len(down) == 0, strings.Join(down, ", "), nil
}

// alerts returns the alerts in state (firing or pending) by name, each
// with its labels.
func (s *promServer) alerts(ctx context.Context, state promv1.AlertState) (map[string][]model.LabelSet, error) {
	res, err := s.api.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]model.LabelSet{}
	for _, a := range res.Alerts {
		if a.State == state {
			name := string(a.Labels[model.AlertNameLabel])
			out[name] = append(out[name], a.Labels)
		}
	}
	return out, nil
}

// ruleHealth returns every alerting rule that failed its last evaluation,
// and the oldest last evaluation of any of them.
func (s *promServer) ruleHealth(ctx context.Context) ([]string, time.Time, error) {
	res, err := s.api.Rules(ctx, nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	var bad []string
	var oldest time.Time
	for _, g := range res.Groups {
		for _, r := range g.Rules {
			a, ok := r.(promv1.AlertingRule)
			if !ok {
				continue
			}
			if a.Health != promv1.RuleHealthGood || a.LastError != "" {
				bad = append(bad, fmt.Sprintf("%s: %s %s", a.Name, a.Health, a.LastError))
			}
			if oldest.IsZero() || a.LastEvaluation.Before(oldest) {
				oldest = a.LastEvaluation
			}
		}
	}
	return bad, oldest, nil
}

// query evaluates expr now.
func (s *promServer) query(ctx context.Context, expr string) (model.Vector, error) {
	v, warnings, _, err := s.api.Query(ctx, expr, time.Now())
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("query %s: warnings %v", expr, warnings)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: a %s, not a vector", expr, v.Type())
	}
	return vec, nil
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
