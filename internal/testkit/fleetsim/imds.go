package fleetsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// identity is what the metadata mock serves for one instance.
type identity struct {
	ID, Type, AZ, Region, Account, Lifecycle, Arch string
}

// metadataMock is one running amazon-ec2-metadata-mock.
type metadataMock struct {
	cmd  *exec.Cmd
	done chan struct{}
	port int
	conf string
	bin  string
	log  string
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startMetadata writes the instance's mock config into dir and starts the mock on a free port.
func startMetadata(ctx context.Context, bin, dir string, id identity) (*metadataMock, error) {
	conf := map[string]any{
		"metadata": map[string]any{"values": map[string]string{
			"instance-id": id.ID, "instance-type": id.Type, "placement-availability-zone": id.AZ,
			"placement-region": id.Region, "instance-life-cycle": id.Lifecycle,
		}},
		"dynamic": map[string]any{"values": map[string]any{"instance-identity-document": map[string]string{
			"accountId": id.Account, "instanceId": id.ID, "instanceType": id.Type, "availabilityZone": id.AZ,
			"region": id.Region, "architecture": id.Arch, "imageId": "ami-12c6146b", "privateIp": "10.0.0.10",
			"pendingTime": time.Now().UTC().Format(time.RFC3339), "version": "2017-09-30",
		}}},
	}
	b, _ := json.Marshal(conf)
	m := &metadataMock{conf: filepath.Join(dir, "imds.json"), bin: bin, log: filepath.Join(dir, "imds.log")}
	if err := os.WriteFile(m.conf, b, 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	m.port = port
	// No spot notice until one is asked for: the mock would otherwise announce one at once.
	return m, m.start(ctx, "2099-01-01T00:00:00Z")
}

func (m *metadataMock) start(ctx context.Context, spotAt string) error {
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	m.cmd = exec.Command(m.bin, "-n", "127.0.0.1", "-p", strconv.Itoa(m.port), "-I", "-c", m.conf, "--mock-trigger-time", spotAt)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.Dir = filepath.Dir(m.conf)
	m.cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(m.conf)) // the mock looks for a config in $HOME too
	if err := m.cmd.Start(); err != nil {
		return fmt.Errorf("start metadata mock: %w", err)
	}
	done := make(chan struct{})
	m.done = done
	go func() { _ = m.cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, m.url()+"/latest/api/token", nil)
		req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select { // the child is starting to listen; the loop is bounded by deadline
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return fmt.Errorf("metadata mock exited at start; see %s", m.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("metadata mock on port %d did not answer within 10s; see %s", m.port, m.log)
}

func (m *metadataMock) url() string { return "http://127.0.0.1:" + strconv.Itoa(m.port) }

func (m *metadataMock) stop() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// interrupt restarts the mock announcing a spot interruption from now on.
func (m *metadataMock) interrupt(ctx context.Context) error {
	m.stop()
	return m.start(ctx, time.Now().UTC().Format(time.RFC3339))
}
