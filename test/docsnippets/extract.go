package docsnippets

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A Command is one shell command an operator is told to run, as a Markdown
// file writes it in a fenced shell block.
type Command struct {
	// File is the Markdown file, relative to the repository root
	// (README.md, docs/helm.md).
	File string
	// Line is the 1-based line of the file where the command starts.
	Line int
	// Text is the command as the shell reads it: continuation lines joined
	// into one, prompts and comments removed; a command that spans lines
	// for another reason (a loop, a quoted argument, a heredoc) keeps its
	// newlines.
	Text string
}

// ID is the command's identity: the file and the command text. Two
// occurrences of the same text in one file are the same command.
func (c Command) ID() string { return c.File + ": " + c.Text }

// shellLanguages are the info strings of the fenced blocks that hold shell
// commands; console blocks hold a transcript, commands after "$ ".
var shellLanguages = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// DocFiles returns the Markdown files whose snippets count, relative to
// root: README.md and docs/*.md, sorted.
func DocFiles(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("listing docs: %w", err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, filepath.ToSlash(rel))
	}
	slices.Sort(files[1:])
	return files, nil
}

// Extract returns the commands of every shell block of the files (relative
// to root), in file order, then line order.
func Extract(root string, files []string) ([]Command, error) {
	var out []Command
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		cmds, err := ExtractMarkdown(f, string(data))
		if err != nil {
			return nil, err
		}
		out = append(out, cmds...)
	}
	return out, nil
}

// fenceOpen matches the opening line of a fenced code block: its
// indentation, its fence and its info string.
var fenceOpen = regexp.MustCompile("^( *)(`{3,}|~{3,})[ \t]*([^ \t`]*)")

// A block is the body of one fenced code block.
type block struct {
	lang  string
	line  int // the file line of the first body line
	lines []string
}

// blocks returns the fenced code blocks of a Markdown text, their bodies
// without the fence's indentation (a block inside a list item is indented
// like the item's text).
func blocks(text string) []block {
	var out []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence := len(m[1]), m[2]
		b := block{lang: strings.ToLower(m[3]), line: i + 2}
		for i++; i < len(lines); i++ {
			l := lines[i]
			if t := strings.TrimSpace(l); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				break
			}
			b.lines = append(b.lines, dedent(l, indent))
		}
		out = append(out, b)
	}
	return out
}

// dedent removes up to n leading spaces.
func dedent(l string, n int) string {
	for i := 0; i < n && strings.HasPrefix(l, " "); i++ {
		l = l[1:]
	}
	return l
}

// isConsole says whether a block is a console transcript: tagged so, or
// untagged with a first line that is a "$ " prompt (how docs/ writes a
// command followed by its output).
func (b block) isConsole() bool {
	if b.lang == "console" {
		return true
	}
	return b.lang == "" && len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "$ ")
}

// ExtractMarkdown returns the commands of the shell blocks of one Markdown
// file's text; file names them.
func ExtractMarkdown(file, text string) ([]Command, error) {
	var out []Command
	for _, b := range blocks(text) {
		console := b.isConsole()
		if !console && !shellLanguages[b.lang] {
			continue
		}
		cmds, err := splitBlock(b, console)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, b.line-1, err)
		}
		for i := range cmds {
			cmds[i].File = file
		}
		out = append(out, cmds...)
	}
	return out, nil
}

// splitBlock splits a block's body into commands. In a console block only
// lines after a "$ " prompt, and the lines that complete such a command
// (after an optional "> " prompt), are commands; the rest is output.
func splitBlock(b block, console bool) ([]Command, error) {
	var out []Command
	var sc scanner
	var cur strings.Builder
	start, joinNext := 0, false
	for i, l := range b.lines {
		open := cur.Len() > 0 || sc.incomplete()
		switch {
		case console && !open:
			rest, ok := strings.CutPrefix(l, "$ ")
			if !ok {
				continue // output
			}
			l = rest
		case console:
			l = strings.TrimPrefix(l, "> ")
		}
		if !open {
			start = b.line + i
		}
		literal := sc.quote != 0 || len(sc.heredocs) > 0
		line, cont := sc.feed(l)
		switch {
		case joinNext:
			cur.WriteString(strings.TrimLeft(line, " \t"))
		case line == "" && !literal:
			// a blank or comment line between or inside commands
		case cur.Len() > 0:
			cur.WriteString("\n" + line)
		default:
			cur.WriteString(line)
		}
		joinNext = cont
		if cont {
			// The shell joins the lines; so does the command's text.
			s := strings.TrimRight(strings.TrimSuffix(cur.String(), `\`), " \t")
			cur.Reset()
			cur.WriteString(s + " ")
		}
		if sc.incomplete() {
			continue
		}
		if text := strings.TrimSpace(cur.String()); text != "" {
			out = append(out, Command{Line: start, Text: text})
		}
		cur.Reset()
	}
	if sc.incomplete() {
		return nil, fmt.Errorf("a shell command starting at line %d never ends (%s)", start, sc.why())
	}
	return out, nil
}

// scanner follows what a shell has left open at the end of each line it is
// fed: a quote, a continuation, a compound command (for, while, if, case,
// braces, parentheses) or a heredoc, so that a command is known to end only
// where the shell would run it.
type scanner struct {
	quote    byte // '\'' or '"' while a quoted string is open
	cont     bool // the last line ended in a continuation backslash
	depth    int  // open compound commands
	parens   int  // open parentheses
	pending  []heredoc
	heredocs []heredoc // heredoc bodies being read, first first
}

type heredoc struct {
	delim string
	tabs  bool // <<-: leading tabs of the body and the delimiter go
}

var (
	openers = map[string]bool{"for": true, "while": true, "until": true, "if": true, "case": true, "{": true}
	closers = map[string]bool{"done": true, "fi": true, "esac": true, "}": true}
	// commandStarters are words after which the next word is in command
	// position.
	commandStarters = map[string]bool{"do": true, "then": true, "else": true, "elif": true, "!": true, "{": true, "time": true}
	heredocStart    = regexp.MustCompile(`^<<(-?)[ \t]*(['"]?)([A-Za-z_][A-Za-z0-9_]*)(['"]?)`)
)

func (s *scanner) incomplete() bool {
	return s.quote != 0 || s.cont || s.depth > 0 || s.parens > 0 || len(s.heredocs) > 0
}

func (s *scanner) why() string {
	switch {
	case s.quote != 0:
		return fmt.Sprintf("an open %c quote", s.quote)
	case s.cont:
		return "a trailing backslash"
	case len(s.heredocs) > 0:
		return "a heredoc without its delimiter " + s.heredocs[0].delim
	default:
		return "an open compound command or parenthesis"
	}
}

// feed reads one line and returns it without its comment, and whether it
// ends in a continuation backslash.
func (s *scanner) feed(line string) (string, bool) {
	if len(s.heredocs) > 0 {
		h := s.heredocs[0]
		body := line
		if h.tabs {
			body = strings.TrimLeft(body, "\t")
		}
		if body == h.delim {
			s.heredocs = s.heredocs[1:]
		}
		return line, false
	}
	// A line starts in command position unless it continues a quote or a
	// command.
	cmdPos := s.quote == 0 && !s.cont
	s.cont = false
	var word strings.Builder
	endWord := func() {
		w := word.String()
		word.Reset()
		if w == "" {
			return
		}
		if cmdPos {
			switch {
			case openers[w]:
				s.depth++
			case closers[w] && s.depth > 0:
				s.depth--
			}
		}
		cmdPos = commandStarters[w]
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch s.quote {
		case '\'':
			if c == '\'' {
				s.quote = 0
			}
			word.WriteByte(c)
			continue
		case '"':
			switch c {
			case '\\':
				i++
			case '"':
				s.quote = 0
			}
			word.WriteByte(c)
			continue
		}
		switch c {
		case '\\':
			if i == len(line)-1 {
				s.cont = true
				endWord()
				return line, true
			}
			word.WriteByte(c)
			i++
			word.WriteByte(line[i])
		case '\'', '"':
			s.quote = c
			word.WriteByte(c)
		case '#':
			if word.Len() == 0 {
				endWord()
				return strings.TrimRight(line[:i], " \t"), false
			}
			word.WriteByte(c)
		case ' ', '\t':
			endWord()
		case ';', '&', '|':
			endWord()
			cmdPos = true
		case '(':
			endWord()
			s.parens++
			cmdPos = true
		case ')':
			endWord()
			if s.parens > 0 {
				s.parens--
			}
		case '<':
			if strings.HasPrefix(line[i:], "<<<") { // a here-string
				endWord()
				i += 2
				continue
			}
			if m := heredocStart.FindStringSubmatch(line[i:]); m != nil && m[2] == m[4] {
				endWord()
				s.pending = append(s.pending, heredoc{delim: m[3], tabs: m[1] == "-"})
				i += len(m[0]) - 1
				continue
			}
			endWord()
		default:
			word.WriteByte(c)
		}
	}
	endWord()
	if s.quote == 0 {
		s.heredocs, s.pending = append(s.heredocs, s.pending...), nil
	}
	return line, false
}

// Blocks returns the bodies of the fenced blocks of a Markdown text whose
// info string is lang, without the fence's indentation.
func Blocks(text, lang string) []string {
	var out []string
	for _, b := range blocks(text) {
		if b.lang == lang {
			out = append(out, strings.Join(b.lines, "\n")+"\n")
		}
	}
	return out
}
