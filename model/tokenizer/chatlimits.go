package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	gtokens "github.com/nikolalohinski/gonja/v2/tokens"
)

// A chat template comes with the model's files, and a request's messages
// choose the path it takes: one render is held to limits, each an error
// for that render (ErrTemplateLimit), never a crash of the process.
const (
	// MaxTemplateSteps bounds the loop iterations and macro calls of one
	// render.
	MaxTemplateSteps = 100_000
	// MaxTemplateRange bounds the items one range() makes (Jinja's sandbox
	// has the same bound, MAX_RANGE).
	MaxTemplateRange = 100_000
	// MaxTemplateOutput bounds a render's output and any string or list a
	// {% set %} makes, in bytes (lists: items).
	MaxTemplateOutput = 16 << 20
	// MaxTemplateFrames bounds the Go stack a render may use, in frames:
	// recursion through macros, recursive loops or call blocks stops
	// there, far below the runtime's fatal stack limit.
	MaxTemplateFrames = 4096
)

// ErrTemplateLimit is the cause of a render stopped at one of the limits
// above (errors.Is); a render stopped by its context's end has the
// context's error instead.
var ErrTemplateLimit = errors.New("chat template exceeded a limit")

// renderKey names the render's state in the template's context.
const renderKey = "__dlmcache_render__"

// renderState is one render's budget.
type renderState struct {
	ctx   context.Context
	steps int
	pcs   []uintptr
	err   error // the first limit hit: the template engine wraps errors into values
}

func (st *renderState) fail(err error) error {
	if st.err == nil {
		st.err = err
	}
	return st.err
}

// check is run at the start of every loop iteration and macro call.
func (st *renderState) check(where *gtokens.Token) error {
	if st.err != nil {
		return st.err
	}
	st.steps++
	if st.steps > MaxTemplateSteps {
		return st.fail(fmt.Errorf("%w: more than %d loop iterations and macro calls (line %d)", ErrTemplateLimit, MaxTemplateSteps, where.Line))
	}
	if err := st.ctx.Err(); err != nil {
		return st.fail(fmt.Errorf("chat template: rendering stopped at line %d: %w", where.Line, context.Cause(st.ctx)))
	}
	if st.pcs == nil {
		st.pcs = make([]uintptr, MaxTemplateFrames)
	}
	if runtime.Callers(0, st.pcs) == len(st.pcs) {
		return st.fail(fmt.Errorf("%w: recursion deeper than %d stack frames (line %d)", ErrTemplateLimit, MaxTemplateFrames, where.Line))
	}
	return nil
}

func stateOf(r *exec.Renderer) *renderState {
	v, _ := r.Environment.Context.Get(renderKey)
	st, _ := v.(*renderState)
	return st
}

// tick is the control structure put first in every loop body and macro
// body: it checks the render's budget.
type tick struct{ at *gtokens.Token }

func (t *tick) Position() *gtokens.Token { return t.at }
func (t *tick) String() string           { return fmt.Sprintf("limit check (line %d)", t.at.Line) }
func (t *tick) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	if st := stateOf(r); st != nil {
		return st.check(t.at)
	}
	return nil
}

func prependTick(w *nodes.Wrapper, at *gtokens.Token) {
	if w == nil {
		return
	}
	if w.Location != nil {
		at = w.Location
	}
	t := &tick{at: at}
	w.Nodes = append([]nodes.Node{&nodes.ControlStructureBlock{Location: at, Name: "limit", ControlStructure: t}}, w.Nodes...)
}

// sizedSet checks what a {% set %} made: a string, a list or a
// namespace's values no larger than MaxTemplateOutput.
type sizedSet struct {
	exec.ControlStructure
	name string
}

func (s *sizedSet) Execute(r *exec.Renderer, tag *nodes.ControlStructureBlock) error {
	if err := s.ControlStructure.Execute(r, tag); err != nil {
		return err
	}
	st := stateOf(r)
	if st == nil || s.name == "" {
		return nil
	}
	v, _ := r.Environment.Context.Get(s.name)
	if n := valueSize(v); n > MaxTemplateOutput {
		return st.fail(fmt.Errorf("%w: {%% set %s %%} made a value of %d bytes or items (limit %d) at line %d",
			ErrTemplateLimit, s.name, n, MaxTemplateOutput, s.Position().Line))
	}
	return nil
}

// valueSize is a string's length, a list's or map's items plus the length
// of the strings directly in it.
func valueSize(v any) int {
	switch x := v.(type) {
	case string:
		return len(x)
	case *exec.Value:
		if x == nil {
			return 0
		}
		return valueSize(x.Interface())
	case []any:
		n := len(x)
		for _, e := range x {
			if s, ok := e.(string); ok {
				n += len(s)
			}
		}
		return n
	case map[string]any:
		n := len(x)
		for _, e := range x {
			switch s := e.(type) {
			case string:
				n += len(s)
			case []any:
				n += len(s)
			}
		}
		return n
	}
	return 0
}

// limitedControlStructures is gonja's control structures, with a tick in
// every loop and macro body and sizes checked after every set, and
// without include, import, from and extends: a chat template is one
// template (Hugging Face renders it with no loader either).
var limitedControlStructures = func() *exec.ControlStructureSet {
	m := map[string]parser.ControlStructureParser{}
	for _, name := range []string{"autoescape", "block", "filter", "for", "if", "macro", "raw", "set", "with", "do", "break", "continue", "trans", "call"} {
		p, ok := builtins.ControlStructures.Get(name)
		if !ok {
			continue
		}
		m[name] = wrapParser(name, p)
	}
	return exec.NewControlStructureSet(m)
}()

func wrapParser(name string, p parser.ControlStructureParser) parser.ControlStructureParser {
	return func(pp *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		var target string
		if name == "set" {
			if t := args.Current(gtokens.Name); t != nil {
				target = t.Val
			}
		}
		cs, err := p(pp, args)
		if err != nil {
			return cs, err
		}
		switch c := cs.(type) {
		case *controlStructures.ForControlStructure:
			prependTick(c.BodyWrapper, c.Position())
		case *controlStructures.MacroControlStructure:
			prependTick(c.Wrapper, c.Location)
		}
		if ec, ok := cs.(exec.ControlStructure); ok && name == "set" {
			return &sizedSet{ControlStructure: ec, name: target}, nil
		}
		return cs, nil
	}
}

// limitedEnvironment is gonja's default environment with the limited
// control structures and a range() bounded by MaxTemplateRange.
var limitedEnvironment = &exec.Environment{
	Context:           gonja.DefaultContext.Inherit().Update(exec.NewContext(map[string]any{"range": boundedRange})),
	Filters:           gonja.DefaultEnvironment.Filters,
	Tests:             gonja.DefaultEnvironment.Tests,
	ControlStructures: limitedControlStructures,
	Methods:           gonja.DefaultEnvironment.Methods,
}

// boundedRange is Jinja's range(), as a list, refused beyond
// MaxTemplateRange items.
func boundedRange(e *exec.Evaluator, params *exec.VarArgs) ([]int, error) {
	start, stop, step := 0, 0, 1
	for _, a := range params.Args {
		if !a.IsInteger() {
			return nil, errors.New("range: expected signature is [start, ]stop[, step] where all arguments are integers")
		}
	}
	switch len(params.Args) {
	case 1:
		stop = params.Args[0].Integer()
	case 2:
		start, stop = params.Args[0].Integer(), params.Args[1].Integer()
	case 3:
		start, stop, step = params.Args[0].Integer(), params.Args[1].Integer(), params.Args[2].Integer()
	default:
		return nil, errors.New("range: expected signature is [start, ]stop[, step] where all arguments are integers")
	}
	if step == 0 {
		return nil, errors.New("range: step cannot be 0")
	}
	n := 0
	if step > 0 && stop > start {
		n = int((int64(stop) - int64(start) + int64(step) - 1) / int64(step))
	} else if step < 0 && stop < start {
		n = int((int64(start) - int64(stop) - int64(step) - 1) / -int64(step))
	}
	if n > MaxTemplateRange {
		err := fmt.Errorf("%w: range of %d items (limit %d)", ErrTemplateLimit, n, MaxTemplateRange)
		if v, _ := e.Environment.Context.Get(renderKey); v != nil {
			if st, ok := v.(*renderState); ok {
				return nil, st.fail(err)
			}
		}
		return nil, err
	}
	out := make([]int, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

// limitedWriter fails a write past MaxTemplateOutput bytes.
type limitedWriter struct {
	w  io.Writer
	n  int
	st *renderState
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n+len(p) > MaxTemplateOutput {
		return 0, l.st.fail(fmt.Errorf("%w: output beyond %d bytes", ErrTemplateLimit, MaxTemplateOutput))
	}
	l.n += len(p)
	return l.w.Write(p)
}
