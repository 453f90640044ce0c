package ghfake

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// QueueJob queues a job of repository repo for a runner carrying every label in labels; the
// runner that takes it runs command with sh -c. The job belongs to the run its first label
// names, as a job saying `runs-on: [${{ github.run_id }}]` (or `${{ github.run_id }}-<label>`)
// does: the first label up to its first '-' (see QueueRunJob for any other). It returns the job
// id.
func (s *Server) QueueJob(repo string, labels []string, command string) int64 {
	run := ""
	if len(labels) > 0 {
		run, _, _ = strings.Cut(labels[0], "-")
	}
	return s.QueueRunJob(repo, run, labels, command)
}

// QueueRunJob queues a job of run run of repository repo for a runner carrying every label in
// labels (a job of one run may name another run's label: run ids are public). It returns the job
// id.
func (s *Server) QueueRunJob(repo, run string, labels []string, command string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobSeq++
	j := &Job{ID: s.jobSeq, Repo: Scope(repo), RunID: run, Labels: slices.Clone(labels), Command: command, Status: "queued", done: make(chan struct{}),
		CreatedAt: s.now().UTC()}
	s.jobs[j.ID] = j
	s.emit(j, "queued")
	close(s.jobWaiters) // wake runners waiting for work
	s.jobWaiters = make(chan struct{})
	return j.ID
}

// QueueWorkflowJob queues a job of the workflow run runID (numeric, as GitHub's run ids are) of
// repository repo, as QueueRunJob does. It returns the job id.
func (s *Server) QueueWorkflowJob(repo string, runID int64, labels []string, command string) int64 {
	return s.QueueRunJob(repo, strconv.FormatInt(runID, 10), labels, command)
}

// CancelJob cancels job id, as "Cancel workflow" does: a queued job is completed at once with
// conclusion cancelled and no runner; the runner of a job in progress learns it from its next
// heartbeat and kills the job, which is then completed cancelled. A completed job stays as it is.
func (s *Server) CancelJob(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return
	}
	switch j.Status {
	case "queued":
		s.complete(j, "cancelled", "The operation was canceled.")
	case "in_progress":
		j.cancel = true
	}
}

// start hands job j to runner x. The caller holds s.mu.
func (s *Server) start(j *Job, x *Runner) {
	j.Status, j.RunnerName, j.RunnerID, j.StartedAt, j.lastBeat = "in_progress", x.Name, x.ID, s.now().UTC(), time.Now()
	j.RunnerGroup = x.Group
	if j.RunnerGroup == "" {
		j.RunnerGroup = DefaultGroup
	}
	x.Busy, x.tookJob = true, true
	s.running[j.ID] = j
	s.emit(j, "in_progress")
}

// complete ends job j with conclusion; its runner, if any, is the caller's to update. The caller
// holds s.mu.
func (s *Server) complete(j *Job, conclusion, output string) {
	j.Status, j.Conclusion, j.Output, j.CompletedAt = "completed", conclusion, output, s.now().UTC()
	delete(s.running, j.ID)
	close(j.done)
	s.emit(j, "completed")
}

// Job returns a copy of job id.
func (s *Server) Job(id int64) (Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return Job{}, false
	}
	c := *j
	c.done = nil
	return c, true
}

// WaitJob waits until job id is completed, or ctx ends.
func (s *Server) WaitJob(ctx context.Context, id int64) (Job, error) {
	s.mu.Lock()
	j, ok := s.jobs[id]
	s.mu.Unlock()
	if !ok {
		return Job{}, fmt.Errorf("job %d: not queued", id)
	}
	select {
	case <-ctx.Done():
		c, _ := s.Job(id)
		return c, fmt.Errorf("job %d still %s: %w", id, c.Status, ctx.Err())
	case <-j.done:
		c, _ := s.Job(id)
		return c, nil
	}
}

// jobControl serves QueueJob, Job and Runners over HTTP, for the demo.
func (s *Server) jobControl(mux *http.ServeMux) {
	mux.HandleFunc("POST /_fake/jobs", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Repo    string   `json:"repo"`
			RunID   string   `json:"runId"`
			Labels  []string `json:"labels"`
			Command string   `json:"command"`
		}
		if err := decode(r, &body); err != nil || body.Repo == "" || len(body.Labels) == 0 {
			writeError(w, http.StatusBadRequest, "want {repo, labels, command} and optionally runId")
			return
		}
		var id int64
		if body.RunID != "" {
			id = s.QueueRunJob(body.Repo, body.RunID, body.Labels, body.Command)
		} else {
			id = s.QueueJob(body.Repo, body.Labels, body.Command)
		}
		writeJSON(w, http.StatusCreated, map[string]int64{"id": id})
	})
	mux.HandleFunc("GET /_fake/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
		j, ok := s.Job(id)
		if !ok {
			writeError(w, http.StatusNotFound, "no such job")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": j.ID, "repo": j.Repo, "runId": j.RunID, "labels": j.Labels, "status": j.Status,
			"conclusion": j.Conclusion, "runner": j.RunnerName, "output": j.Output})
	})
	mux.HandleFunc("GET /_fake/runners", func(w http.ResponseWriter, _ *http.Request) {
		all := s.Runners("")
		out := make([]map[string]any, len(all))
		for i, x := range all {
			out[i] = map[string]any{"id": x.ID, "name": x.Name, "scope": x.Scope, "labels": x.Labels, "status": x.Status, "busy": x.Busy}
		}
		writeJSON(w, http.StatusOK, out)
	})
}
