package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	Line  int    // first line, 1-based
	Cmd   string // upper case: FROM, RUN, COPY, ...
	Flags []string
	Args  string
}

// stage is one build stage: its FROM and the instructions after it.
type stage struct {
	Image string
	Name  string
	Body  []instruction
}

// parseDockerfile splits a Dockerfile into stages. It understands what this
// repository's Dockerfile may use: comments, parser directives, line
// continuations and --flag options; heredocs are rejected so that they cannot
// hide a RUN from the checks.
func parseDockerfile(t testing.TB, text string) (args []instruction, stages []stage) {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		start := i
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			line = strings.TrimSuffix(line, "\\") + " " + next
		}
		if strings.Contains(line, "<<") {
			t.Fatalf("Dockerfile line %d: heredocs are not supported by this check", start+1)
		}
		cmd, rest, _ := strings.Cut(line, " ")
		in := instruction{Line: start + 1, Cmd: strings.ToUpper(cmd)}
		fields := strings.Fields(rest)
		for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
			in.Flags = append(in.Flags, fields[0])
			fields = fields[1:]
		}
		in.Args = strings.Join(fields, " ")
		switch {
		case in.Cmd == "FROM":
			s := stage{Image: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.Name = fields[2]
			}
			stages = append(stages, s)
		case len(stages) == 0:
			if in.Cmd != "ARG" {
				t.Fatalf("Dockerfile line %d: %s before the first FROM", in.Line, in.Cmd)
			}
			args = append(args, in)
		default:
			stages[len(stages)-1].Body = append(stages[len(stages)-1].Body, in)
		}
	}
	return args, stages
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.Body {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func (s stage) last(cmd string) (instruction, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return instruction{}, false
	}
	return all[len(all)-1], true
}

func flagValue(in instruction, name string) string {
	for _, f := range in.Flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// goMinor returns "1.26" for a go.mod that says "go 1.26.0".
func goMinor(t testing.TB, gomod string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?$`).FindStringSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return m[1]
}

func TestDockerfile(t *testing.T) {
	_, stages := parseDockerfile(t, readRepoFile(t, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a builder and a runtime stage", len(stages))
	}
	build, runtime := stages[0], stages[len(stages)-1]
	bins := imageBinaries(t)

	t.Run("builder is an exact Go release matching go.mod", func(t *testing.T) {
		m := regexp.MustCompile(`^golang:(\d+\.\d+)\.\d+-bookworm(@sha256:[0-9a-f]{64})?$`).FindStringSubmatch(build.Image)
		if m == nil {
			t.Fatalf("builder image %q is not pinned as golang:<major>.<minor>.<patch>-bookworm[@sha256:...]", build.Image)
		}
		if want := goMinor(t, readRepoFile(t, "go.mod")); m[1] != want {
			t.Errorf("builder Go %s, go.mod wants go %s", m[1], want)
		}
		if build.Name == "" {
			t.Error("builder stage has no name (FROM ... AS <name>), so COPY --from cannot refer to it by name")
		}
	})

	t.Run("builder runs the CI build target", func(t *testing.T) {
		var found bool
		for _, run := range build.all("RUN") {
			if regexp.MustCompile(`(^|[;&|]\s*)make build(\s|$)`).MatchString(run.Args) {
				found = true
			}
		}
		if !found {
			t.Error("no RUN make build in the builder stage; the image must be built the way CI builds")
		}
		recipe := makeRecipe(t, readRepoFile(t, "Makefile"), "build")
		if !strings.Contains(recipe, "CGO_ENABLED=0") {
			t.Errorf("make build does not set CGO_ENABLED=0, so the binaries may not be static:\n%s", recipe)
		}
	})

	t.Run("module download layer has the go.mod of every local replace", func(t *testing.T) {
		download := 0
		for _, run := range build.all("RUN") {
			if strings.Contains(run.Args, "go mod download") {
				download = run.Line
				break
			}
		}
		if download == 0 {
			return
		}
		var copied []string
		for _, in := range build.all("COPY") {
			if in.Line < download {
				copied = append(copied, strings.Fields(in.Args)...)
			}
		}
		for _, m := range regexp.MustCompile(`(?m)^replace\s+\S+\s+=>\s+\./(\S+)\s*$`).FindAllStringSubmatch(readRepoFile(t, "go.mod"), -1) {
			if want := m[1] + "/go.mod"; !slices.Contains(copied, want) {
				t.Errorf("go.mod replaces a module with ./%s, but no COPY before line %d (go mod download) copies %s", m[1], download, want)
			}
		}
	})

	t.Run("runtime is distroless static or scratch", func(t *testing.T) {
		ok := runtime.Image == "scratch" ||
			regexp.MustCompile(`^gcr\.io/distroless/static-debian\d+:nonroot(@sha256:[0-9a-f]{64})?$`).MatchString(runtime.Image)
		if !ok {
			t.Errorf("runtime image %q, want gcr.io/distroless/static-debian12:nonroot or scratch", runtime.Image)
		}
		for _, in := range runtime.all("RUN") {
			t.Errorf("line %d: RUN in the runtime stage; a distroless image has no shell", in.Line)
		}
	})

	t.Run("runtime runs as numeric non-root user 65532", func(t *testing.T) {
		user, ok := runtime.last("USER")
		if !ok {
			t.Fatal("runtime stage sets no USER")
		}
		if user.Args != "65532" && user.Args != "65532:65532" {
			t.Errorf("USER %s, want 65532 or 65532:65532 (numeric, so runAsNonRoot can verify it)", user.Args)
		}
	})

	t.Run("runtime carries every binary make build produces", func(t *testing.T) {
		copied := map[string]bool{}
		for _, in := range runtime.all("COPY") {
			from := flagValue(in, "from")
			if from == "" {
				t.Errorf("line %d: COPY into the runtime stage from the build context; copy only built binaries", in.Line)
				continue
			}
			if from != build.Name {
				t.Errorf("line %d: COPY --from=%s, want the builder stage %s", in.Line, from, build.Name)
			}
			parts := strings.Fields(in.Args)
			if dst := parts[len(parts)-1]; dst != "/" {
				t.Errorf("line %d: binaries copied to %s, want / (manifests run /<binary>)", in.Line, dst)
			}
			for _, src := range parts[:len(parts)-1] {
				copied[src[strings.LastIndex(src, "/")+1:]] = true
			}
		}
		for _, b := range bins {
			if !copied[b] {
				t.Errorf("binary %s is not copied into the runtime image", b)
			}
		}
	})

	t.Run("default entrypoint is one of the binaries, exec form", func(t *testing.T) {
		ep, ok := runtime.last("ENTRYPOINT")
		if !ok {
			t.Fatal("runtime stage has no ENTRYPOINT")
		}
		var argv []string
		if err := json.Unmarshal([]byte(ep.Args), &argv); err != nil || len(argv) == 0 {
			t.Fatalf("ENTRYPOINT %s is not a JSON exec form (there is no shell in the image): %v", ep.Args, err)
		}
		if !slices.Contains(bins, strings.TrimPrefix(argv[0], "/")) || !strings.HasPrefix(argv[0], "/") {
			t.Errorf("ENTRYPOINT %q, want /<one of %v>", argv[0], bins)
		}
	})
}

func TestParseDockerfile(t *testing.T) {
	_, stages := parseDockerfile(t, `# syntax=docker/dockerfile:1
ARG BASE=golang:1.26.8-bookworm
FROM ${BASE} AS build
RUN --mount=type=cache,target=/go \
    # a comment inside a continuation
    make build
FROM scratch
COPY --from=build /src/bin/a /src/bin/b /
USER 65532
`)
	if len(stages) != 2 {
		t.Fatalf("got %d stages, want 2", len(stages))
	}
	run := stages[0].all("RUN")
	if len(run) != 1 || run[0].Args != "make build" || flagValue(run[0], "mount") != "type=cache,target=/go" {
		t.Errorf("RUN parsed as %+v", run)
	}
	if stages[0].Name != "build" || stages[1].Image != "scratch" {
		t.Errorf("stages parsed as %+v", stages)
	}
	cp, _ := stages[1].last("COPY")
	if flagValue(cp, "from") != "build" || cp.Args != "/src/bin/a /src/bin/b /" {
		t.Errorf("COPY parsed as %+v", cp)
	}
}
