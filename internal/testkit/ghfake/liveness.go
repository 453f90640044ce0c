package ghfake

import (
	"fmt"
	"net/http"
	"time"
)

// Heartbeat is the server's answer to a runner's heartbeat during a job.
type Heartbeat struct {
	// Cancel tells the runner to kill the job (CancelJob): it then reports it cancelled.
	Cancel bool `json:"cancel"`
}

// HeartbeatEvery is how often the stand-in runner sends a heartbeat while it runs a job.
const HeartbeatEvery = 500 * time.Millisecond

// lostOutput is GitHub's annotation of a job whose runner went silent.
const lostOutput = "The self-hosted runner: %s lost communication with the server. Verify the machine is running and has a healthy network connection. " +
	"Anything in your workflow that terminates the runner process, starves it for CPU/Memory, or blocks its network access can cause this error."

// SetRunnerLostAfter sets how long a runner running a job may go without a heartbeat before the
// server takes it for lost (10 s by default): the job is then completed with conclusion failure
// and the runner is offline and idle, as GitHub does with a runner that died mid-job.
func (s *Server) SetRunnerLostAfter(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostAfter = d
}

// heartbeat serves POST /_fake/runners/{id}/jobs/{job}/heartbeat: the runner is alive and still
// running the job; the answer says whether to cancel it. A job no longer in progress on the
// runner answers 404, which the runner takes for a cancellation.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.authRunner(w, r)
	if x == nil {
		return
	}
	j := s.runningOn(w, r, x)
	if j == nil {
		return
	}
	j.lastBeat = time.Now()
	writeJSON(w, http.StatusOK, Heartbeat{Cancel: j.cancel})
}

// watchRunners completes the jobs whose runner went silent, until Close. Liveness is judged by
// the wall clock, not the server's (SetClock), so that a test moving the server's clock for
// token expiry does not lose runners.
func (s *Server) watchRunners() {
	defer s.bg.Done()
	for {
		s.mu.Lock()
		every := min(max(s.lostAfter/5, 20*time.Millisecond), 500*time.Millisecond)
		s.mu.Unlock()
		select {
		case <-s.life.Done():
			return
		case <-time.After(every):
		}
		s.loseSilentRunners()
	}
}

// loseSilentRunners completes every job in progress whose runner has not been heard from for
// lostAfter: failure (cancelled when CancelJob had asked for it), and its runner offline and idle.
func (s *Server) loseSilentRunners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, j := range s.running {
		if now.Sub(j.lastBeat) < s.lostAfter {
			continue
		}
		conclusion := "failure"
		if j.cancel {
			conclusion = "cancelled"
		}
		s.complete(j, conclusion, fmt.Sprintf(lostOutput, j.RunnerName))
		if x, ok := s.runners[j.RunnerID]; ok {
			x.Status, x.Busy = "offline", false
		}
	}
}
