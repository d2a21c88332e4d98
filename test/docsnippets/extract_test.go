package docsnippets

import (
	"slices"
	"strings"
	"testing"
)

// TestExtractMarkdown splits shell blocks into commands as a shell reads
// them.
func TestExtractMarkdown(t *testing.T) {
	tests := []struct {
		name string
		md   string
		want []Command // File is "f.md" throughout
	}{
		{
			name: "one command a line, comments dropped",
			md:   "text\n\n```sh\nmake build   # bin/\n# a whole-line comment\n\nkubectl get nodes\n```\n",
			want: []Command{{Line: 4, Text: "make build"}, {Line: 7, Text: "kubectl get nodes"}},
		},
		{
			name: "continuation lines joined",
			md:   "```bash\nhelm install fenceline deploy/helm/fenceline \\\n  --namespace fenceline-system \\\n  --set a=b\n```\n",
			want: []Command{{Line: 2, Text: "helm install fenceline deploy/helm/fenceline --namespace fenceline-system --set a=b"}},
		},
		{
			name: "a hash inside quotes or a word is no comment",
			md:   "```shell\nkubectl get x -o jsonpath='{.a # b}' a#b # c\n```\n",
			want: []Command{{Line: 2, Text: "kubectl get x -o jsonpath='{.a # b}' a#b"}},
		},
		{
			name: "a loop is one command, its comment lines dropped",
			md:   "```sh\nfor k in a b; do\n  # why\n  kubectl label \"$k\" x=y\ndone\nkubectl get nodes\n```\n",
			want: []Command{{Line: 2, Text: "for k in a b; do\n  kubectl label \"$k\" x=y\ndone"}, {Line: 6, Text: "kubectl get nodes"}},
		},
		{
			name: "a quoted argument over several lines, with a blank line",
			md:   "```sh\nkubectl patch x -p '[\n  {\"op\": \"add\"},\n\n  {\"op\": \"remove\"}\n]'\n```\n",
			want: []Command{{Line: 2, Text: "kubectl patch x -p '[\n  {\"op\": \"add\"},\n\n  {\"op\": \"remove\"}\n]'"}},
		},
		{
			name: "a heredoc, comment-like lines kept",
			md:   "```sh\nkubectl apply -f - <<EOF\n# not a comment\nkind: Namespace\nEOF\nkubectl get ns\n```\n",
			want: []Command{{Line: 2, Text: "kubectl apply -f - <<EOF\n# not a comment\nkind: Namespace\nEOF"}, {Line: 6, Text: "kubectl get ns"}},
		},
		{
			name: "a here-string is no heredoc",
			md:   "```sh\ngrep x <<< \"$y\"\nkubectl get ns\n```\n",
			want: []Command{{Line: 2, Text: "grep x <<< \"$y\""}, {Line: 3, Text: "kubectl get ns"}},
		},
		{
			name: "console: prompts, continuations after > and output",
			md:   "```console\n$ kubectl get nodes\nNAME   STATUS\nnode-a Ready\n$ kubectl annotate csidriver d \\\n> a=b\ncsidriver/d annotated\n```\n",
			want: []Command{{Line: 2, Text: "kubectl get nodes"}, {Line: 5, Text: "kubectl annotate csidriver d a=b"}},
		},
		{
			name: "an untagged block that starts with a prompt is a transcript",
			md:   "```\n$ kubectl fenceline status\nCSI DRIVERS\n```\n\n```\nnot a command\n```\n",
			want: []Command{{Line: 2, Text: "kubectl fenceline status"}},
		},
		{
			name: "a block in a list item, other languages and tildes",
			md:   "1. Do:\n\n   ```sh\n   kubectl get nodes\n   ```\n\n```yaml\nkind: Pod\n```\n\n~~~sh\nmake test\n~~~\n",
			want: []Command{{Line: 4, Text: "kubectl get nodes"}, {Line: 12, Text: "make test"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExtractMarkdown("f.md", tc.md)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				tc.want[i].File = "f.md"
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// TestExtractUnterminated reports a command the block never ends, instead
// of guessing where it stops.
func TestExtractUnterminated(t *testing.T) {
	for _, md := range []string{
		"```sh\nkubectl patch x -p '{\n```\n",
		"```sh\nfor k in a b; do\n  echo $k\n```\n",
		"```sh\ncat <<EOF\nx\n```\n",
	} {
		if _, err := ExtractMarkdown("f.md", md); err == nil || !strings.Contains(err.Error(), "never ends") {
			t.Errorf("%q: error %v, want one saying the command never ends", md, err)
		}
	}
}

// TestSubstitute fills angle-bracket placeholders anywhere and example
// names only as whole words.
func TestSubstitute(t *testing.T) {
	tests := []struct{ text, placeholder, value, want string }{
		{"kubectl get lease fenceline-attacher-<driver>", "<driver>", "d", "kubectl get lease fenceline-attacher-d"},
		{"kubectl fenceline explain dead", "dead", "node-b", "kubectl fenceline explain node-b"},
		{"kubectl get x deadline dead-req dead.x", "dead", "node-b", "kubectl get x deadline dead-req dead.x"},
		{"kubectl apply -k my-fenceline/", "my-fenceline/", "/tmp/o/", "kubectl apply -k /tmp/o/"},
	}
	for _, tc := range tests {
		if got := substitute(tc.text, tc.placeholder, tc.value); got != tc.want {
			t.Errorf("substitute(%q, %q) = %q, want %q", tc.text, tc.placeholder, got, tc.want)
		}
	}
}

// TestClassifyReports: a command in no entry and an entry that matches no
// command are both reported, by file and text.
func TestClassifyReports(t *testing.T) {
	var cmds []Command
	for _, e := range table {
		for _, text := range e.cmds {
			if e.file == "README.md" && text == "make demo" {
				continue // a document no longer holds it
			}
			cmds = append(cmds, Command{File: e.file, Line: 1, Text: text})
		}
	}
	cmds = append(cmds, Command{File: "docs/new.md", Line: 7, Text: "kubectl fenceline new"})
	_, problems := classify(cmds)
	want := []string{
		"table entry matches no command of README.md any more: make demo",
		"docs/new.md:7: a command no table entry runs or skips",
	}
	if len(problems) != len(want) {
		t.Fatalf("problems %q, want one starting with each of %q", problems, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %q, want it to start with %q", problems[i], w)
		}
	}
}
