package deploy

import (
	"fmt"
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
	Line  int // line of the FROM
	Image string
	Name  string
	Flags []string // of the FROM, e.g. --platform=$BUILDPLATFORM
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
			s := stage{Line: in.Line, Image: fields[0], Flags: in.Flags}
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

// declares reports whether the stage declares the build argument name (ARG
// name or ARG name=default); a stage sees no global ARG it does not declare.
func (s stage) declares(name string) bool {
	for _, in := range s.all("ARG") {
		for _, f := range strings.Fields(in.Args) {
			if n, _, _ := strings.Cut(f, "="); n == name {
				return true
			}
		}
	}
	return false
}

func flagValue(flags []string, name string) string {
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// parseLabels reads the key=value pairs of a LABEL instruction; values may be
// double-quoted, with backslash escapes.
func parseLabels(args string) (map[string]string, error) {
	labels := map[string]string{}
	for rest := strings.TrimSpace(args); rest != ""; rest = strings.TrimSpace(rest) {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \t\"") {
			return nil, fmt.Errorf("LABEL %q: want key=value pairs", args)
		}
		var value strings.Builder
		if !strings.HasPrefix(after, `"`) {
			v, tail, _ := strings.Cut(after, " ")
			labels[key], rest = v, tail
			continue
		}
		i := 1
		for ; i < len(after) && after[i] != '"'; i++ {
			if after[i] == '\\' && i+1 < len(after) {
				i++
			}
			value.WriteByte(after[i])
		}
		if i >= len(after) {
			return nil, fmt.Errorf("LABEL %q: unterminated quote after %s=", args, key)
		}
		labels[key], rest = value.String(), after[i+1:]
	}
	return labels, nil
}

// target is a build target resolved through the stages it is built FROM:
// Chain runs from the target back to the stage whose FROM names an image
// rather than a stage.
type target struct {
	Chain []stage
}

// resolveTarget follows FROM <stage> back to an external image.
func resolveTarget(stages []stage, name string) (target, error) {
	byName := map[string]stage{}
	for _, s := range stages {
		if s.Name != "" {
			byName[s.Name] = s
		}
	}
	var tg target
	for s, ok := byName[name]; ok; s, ok = byName[s.Image] {
		if len(tg.Chain) > len(stages) {
			return target{}, fmt.Errorf("stage %s: FROM loop", name)
		}
		tg.Chain = append(tg.Chain, s)
	}
	if len(tg.Chain) == 0 {
		return target{}, fmt.Errorf("no stage named %s", name)
	}
	return tg, nil
}

// base is the external image the target starts from.
func (tg target) base() stage { return tg.Chain[len(tg.Chain)-1] }

// last returns the instruction the image ends up with: the last one in the
// target's own stage, else in the stages it is built from.
func (tg target) last(cmd string) (instruction, bool) {
	for _, s := range tg.Chain {
		if in, ok := s.last(cmd); ok {
			return in, true
		}
	}
	return instruction{}, false
}

// labels returns the image's labels with the stage that sets each; a stage
// overrides the stages it is built from.
func (tg target) labels() (map[string]string, map[string]stage, error) {
	values, from := map[string]string{}, map[string]stage{}
	for i := len(tg.Chain) - 1; i >= 0; i-- {
		for _, in := range tg.Chain[i].all("LABEL") {
			l, err := parseLabels(in.Args)
			if err != nil {
				return nil, nil, fmt.Errorf("line %d: %w", in.Line, err)
			}
			for k, v := range l {
				values[k], from[k] = v, tg.Chain[i]
			}
		}
	}
	return values, from, nil
}

// all returns the instructions of every stage of the target.
func (tg target) all(cmd string) []instruction {
	var out []instruction
	for _, s := range tg.Chain {
		out = append(out, s.all(cmd)...)
	}
	return out
}

func TestParseDockerfile(t *testing.T) {
	_, stages := parseDockerfile(t, `# syntax=docker/dockerfile:1
ARG BASE=golang:1.26.8-bookworm
FROM --platform=$BUILDPLATFORM ${BASE} AS build
RUN --mount=type=cache,target=/go \
    # a comment inside a continuation
    make build
FROM scratch AS base
ARG VERSION
LABEL a=1 b="two words" \
      c="say \"hi\""
USER 65532
FROM base AS app
LABEL a=3
COPY --from=build /src/bin/a /src/bin/b /
`)
	if len(stages) != 3 {
		t.Fatalf("got %d stages, want 3", len(stages))
	}
	run := stages[0].all("RUN")
	if len(run) != 1 || run[0].Args != "make build" || flagValue(run[0].Flags, "mount") != "type=cache,target=/go" {
		t.Errorf("RUN parsed as %+v", run)
	}
	if stages[0].Name != "build" || flagValue(stages[0].Flags, "platform") != "$BUILDPLATFORM" || stages[1].Image != "scratch" {
		t.Errorf("stages parsed as %+v", stages)
	}
	if !stages[1].declares("VERSION") || stages[2].declares("VERSION") {
		t.Error("ARG VERSION declared in the wrong stage")
	}
	tg, err := resolveTarget(stages, "app")
	if err != nil {
		t.Fatal(err)
	}
	if tg.base().Image != "scratch" || len(tg.Chain) != 2 {
		t.Errorf("app resolved to %+v", tg.Chain)
	}
	labels, from, err := tg.labels()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "3", "b": "two words", "c": `say "hi"`}
	if fmt.Sprint(labels) != fmt.Sprint(want) || from["a"].Name != "app" || from["b"].Name != "base" {
		t.Errorf("labels %q (from %v), want %q", labels, from, want)
	}
	if user, ok := tg.last("USER"); !ok || user.Args != "65532" {
		t.Errorf("USER resolved to %+v", user)
	}
	cp, _ := tg.last("COPY")
	if flagValue(cp.Flags, "from") != "build" || cp.Args != "/src/bin/a /src/bin/b /" {
		t.Errorf("COPY parsed as %+v", cp)
	}
	if _, err := resolveTarget(stages, "nope"); err == nil {
		t.Error("resolveTarget of a missing stage succeeded")
	}
	if _, err := parseLabels(`a="open`); err == nil {
		t.Error(`parseLabels accepted an unterminated quote`)
	}
}
