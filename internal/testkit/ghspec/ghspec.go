// Package ghspec gives contract tests GitHub's own published descriptions, as octokit's npm
// packages ship them: the REST API's (@octokit/openapi, OpenAPI 3.0), the webhooks'
// (@octokit/openapi-webhooks, OpenAPI 3.1) and the payloads GitHub recorded
// (@octokit/webhooks-examples). Schemas are compiled by JSON pointer into the loaded description,
// so that its $refs resolve, and validated with github.com/santhosh-tekuri/jsonschema/v6.
//
// make octokit installs the packages, pinned, into .cache/octokit, and make test passes their
// folder in HANGAR_OCTOKIT. Without it a test that needs them is skipped under -short, as those
// needing the emulators are, and fails otherwise.
package ghspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Env names the folder holding octokit's packages (…/node_modules/@octokit).
const Env = "HANGAR_OCTOKIT"

// The files read, relative to that folder.
const (
	restFile     = "openapi/generated/api.github.com.json"
	webhooksFile = "openapi-webhooks/generated/api.github.com.json"
	examplesFile = "webhooks-examples/api.github.com/index.json"
)

// Dir returns the folder of octokit's packages. It skips t under -short when HANGAR_OCTOKIT is
// unset, and otherwise fails it, naming the make target that installs them.
func Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(Env)
	if dir == "" {
		if testing.Short() {
			t.Skip("contract test: needs GitHub's descriptions (make octokit; skipped with -short)")
		}
		t.Fatalf("%s is not set: install GitHub's descriptions with `make octokit` and set %s to the repository's .cache/octokit/node_modules/@octokit (make test does both)",
			Env, Env)
	}
	for _, f := range []string{restFile, webhooksFile, examplesFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("%s=%s lacks %s: run `make octokit` (%v)", Env, dir, f, err)
		}
	}
	return dir
}

// loaded caches each description by path, with its compiled schemas: the REST one is 13 MB,
// read and compiled once per test binary.
var loaded sync.Map // path → *loadResult

type loadResult struct {
	once sync.Once
	spec *spec
	err  error
}

// spec is one description with its compiled schemas.
type spec struct {
	url string // the resource's URL in the compiler
	doc map[string]any

	mu      sync.Mutex
	c       *jsonschema.Compiler
	schemas map[string]*jsonschema.Schema // by JSON pointer
}

// load reads the description at path once (numbers as json.Number, as the validator wants them),
// applies fix to it, and adds it to a compiler as url.
func load(path, url string, fix func(any) any) (*spec, error) {
	v, _ := loaded.LoadOrStore(path, &loadResult{})
	r := v.(*loadResult)
	r.once.Do(func() {
		r.spec, r.err = read(path, url, fix)
	})
	return r.spec, r.err
}

func read(path, url string, fix func(any) any) (*spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if fix != nil {
		doc = fix(doc)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a JSON object", path)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return &spec{url: url, doc: m, c: c, schemas: map[string]*jsonschema.Schema{}}, nil
}

// schema compiles (once) the schema at JSON pointer ptr of the description.
func (s *spec) schema(ptr string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.schemas[ptr]; ok {
		return sch, nil
	}
	sch, err := s.c.Compile(s.url + "#" + ptr)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", ptr, err)
	}
	s.schemas[ptr] = sch
	return sch, nil
}

// validate validates the JSON body against the schema at ptr.
func (s *spec) validate(ptr string, body []byte) error {
	sch, err := s.schema(ptr)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("the body is not JSON: %w", err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("against %s: %w", ptr, err)
	}
	return nil
}

// lookup returns the value at JSON pointer ptr of the description, or nil.
func (s *spec) lookup(ptr string) any {
	var v any = s.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[unescape(tok)]
	}
	return v
}

// escape and unescape are a JSON pointer token's encoding (RFC 6901).
func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

func unescape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
}

// REST is GitHub's REST API description (api.github.com; an enterprise server serves the same
// API under /api/v3).
type REST struct{ s *spec }

// LoadREST loads the REST API's description, its OpenAPI 3.0 schemas turned into JSON Schema
// (see fromOpenAPI30).
func LoadREST(t testing.TB) *REST {
	t.Helper()
	s, err := load(filepath.Join(Dir(t), restFile), "https://api.github.com/openapi.json", fromOpenAPI30)
	if err != nil {
		t.Fatalf("load GitHub's REST description: %v", err)
	}
	return &REST{s: s}
}

// Operation is one operation of the description.
type Operation struct {
	Method   string // upper case
	Template string // the path template, as the description names it (/repos/{owner}/{repo}/…)
	ID       string // operationId
}

// Operation finds the operation a request of method on path (a URL path, under /api/v3 or not;
// any query is ignored) is: the path template that matches it with the most literal segments
// first, as GitHub's router prefers /actions/runners/downloads to /actions/runners/{runner_id}.
func (r *REST) Operation(method, path string) (Operation, error) {
	path, _, _ = strings.Cut(path, "?")
	if rest, ok := strings.CutPrefix(path, "/api/v3/"); ok {
		path = "/" + rest
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	paths, _ := r.s.doc["paths"].(map[string]any)
	var best Operation
	bestScore := -1
	for tmpl, item := range paths {
		ops, _ := item.(map[string]any)
		op, ok := ops[strings.ToLower(method)].(map[string]any)
		if !ok {
			continue
		}
		tsegs := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(tsegs) != len(segs) {
			continue
		}
		score := 0
		for i, ts := range tsegs {
			switch {
			case strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}"):
				score <<= 1
			case ts == segs[i]:
				score = score<<1 | 1
			default:
				score = -1
			}
			if score < 0 {
				break
			}
		}
		if score > bestScore {
			id, _ := op["operationId"].(string)
			best, bestScore = Operation{Method: strings.ToUpper(method), Template: tmpl, ID: id}, score
		}
	}
	if bestScore < 0 {
		return Operation{}, fmt.Errorf("GitHub's REST description has no operation %s %s", method, path)
	}
	return best, nil
}

// ErrUndescribed is returned for a successful answer whose status the operation does not
// describe.
var ErrUndescribed = errors.New("the description does not describe this answer")

// Validate checks an answer of status with body to a request of method on path against the
// operation's response for that status: its schema (application/json), or no body when it
// describes none. An error answer the operation does not describe is held to basic-error,
// GitHub's error body on every endpoint; a success it does not describe is ErrUndescribed.
func (r *REST) Validate(method, path string, status int, body []byte) error {
	op, err := r.Operation(method, path)
	if err != nil {
		return err
	}
	base := "/paths/" + escape(op.Template) + "/" + strings.ToLower(method) + "/responses/" + strconv.Itoa(status)
	resp, _ := r.s.lookup(base).(map[string]any)
	if resp == nil {
		if status < http.StatusBadRequest {
			return fmt.Errorf("%s (%s) answered %d: %w", op.ID, op.Template, status, ErrUndescribed)
		}
		return r.s.validate("/components/schemas/basic-error", body)
	}
	if ref, ok := resp["$ref"].(string); ok {
		base = strings.TrimPrefix(ref, "#")
		resp, _ = r.s.lookup(base).(map[string]any)
	}
	content, _ := resp["content"].(map[string]any)
	if _, ok := content["application/json"]; !ok {
		if len(bytes.TrimSpace(body)) > 0 {
			return fmt.Errorf("%s (%s) answered %d with a body; the description says none: %.200s", op.ID, op.Template, status, body)
		}
		return nil
	}
	if err := r.s.validate(base+"/content/"+escape("application/json")+"/schema", body); err != nil {
		return fmt.Errorf("%s (%s) answered %d: %w", op.ID, op.Template, status, err)
	}
	return nil
}

// fromOpenAPI30 turns an OpenAPI 3.0 description's schemas into JSON Schema 2020-12: a schema
// with nullable: true and a type gets type [T, "null"] (and null among its enum), one without a
// type is wrapped as anyOf [schema, {type: null}]; OpenAPI's boolean exclusiveMinimum and
// exclusiveMaximum become the numbers 2020-12 wants. Examples, enums and defaults are data, left
// as they are.
func fromOpenAPI30(v any) any { return convert(v, false) }

// convert is fromOpenAPI30 of v; props says v is a properties object (names to schemas), whose
// keys are names rather than keywords.
func convert(v any, props bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if !props && (k == "example" || k == "examples" || k == "enum" || k == "default") {
				continue
			}
			x[k] = convert(c, !props && (k == "properties" || k == "patternProperties"))
		}
		if props {
			return x
		}
		for _, b := range []struct{ flag, bound string }{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
			if on, ok := x[b.flag].(bool); ok {
				if on && x[b.bound] != nil {
					x[b.flag] = x[b.bound]
					delete(x, b.bound)
				} else {
					delete(x, b.flag)
				}
			}
		}
		nullable, _ := x["nullable"].(bool)
		delete(x, "nullable")
		if !nullable {
			return x
		}
		if enum, ok := x["enum"].([]any); ok && !containsNull(enum) {
			x["enum"] = append(enum, nil)
		}
		if t, ok := x["type"].(string); ok {
			x["type"] = []any{t, "null"}
			return x
		}
		return map[string]any{"anyOf": []any{x, map[string]any{"type": "null"}}}
	case []any:
		for i, c := range x {
			x[i] = convert(c, false)
		}
	}
	return v
}

func containsNull(enum []any) bool {
	for _, e := range enum {
		if e == nil {
			return true
		}
	}
	return false
}

// Webhooks is GitHub's webhooks description (OpenAPI 3.1, whose schemas are JSON Schema
// 2020-12).
type Webhooks struct{ s *spec }

// LoadWebhooks loads the webhooks' description.
func LoadWebhooks(t testing.TB) *Webhooks {
	t.Helper()
	s, err := load(filepath.Join(Dir(t), webhooksFile), "https://api.github.com/webhooks.json", nil)
	if err != nil {
		t.Fatalf("load GitHub's webhooks description: %v", err)
	}
	return &Webhooks{s: s}
}

// WorkflowJobSchema names the payload schema of a workflow_job delivery of action (queued,
// in_progress, completed, waiting): webhook-workflow-job-queued, -in-progress, ….
func WorkflowJobSchema(action string) string {
	return "webhook-workflow-job-" + strings.ReplaceAll(action, "_", "-")
}

// Validate checks a payload against components/schemas/<name>.
func (w *Webhooks) Validate(name string, body []byte) error {
	if _, ok := w.s.lookup("/components/schemas/" + escape(name)).(map[string]any); !ok {
		return fmt.Errorf("GitHub's webhooks description has no schema %s", name)
	}
	return w.s.validate("/components/schemas/"+escape(name), body)
}

// Examples returns the payloads GitHub recorded for event (workflow_job, ping, …) on
// api.github.com, each as its JSON.
func Examples(t testing.TB, event string) []json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(t), examplesFile))
	if err != nil {
		t.Fatalf("read GitHub's recorded webhook payloads: %v", err)
	}
	var all []struct {
		Name     string            `json:"name"`
		Examples []json.RawMessage `json:"examples"`
	}
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatalf("read GitHub's recorded webhook payloads: %v", err)
	}
	for _, e := range all {
		if e.Name == event {
			return e.Examples
		}
	}
	t.Fatalf("GitHub's recorded webhook payloads have no %s event", event)
	return nil
}
