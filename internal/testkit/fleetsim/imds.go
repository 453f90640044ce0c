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
	"syscall"
	"time"
)

// identity is what the metadata mock serves for one instance.
type identity struct {
	ID, Type, AZ, Region, Account, Lifecycle, Arch string
}

// metadataStartTimeout bounds how long a starting mock may take to answer.
var metadataStartTimeout = 10 * time.Second

// metadataMock is one amazon-ec2-metadata-mock; cmd is nil while none runs.
type metadataMock struct {
	cmd  *exec.Cmd
	done <-chan struct{}
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

// startMetadata writes the instance's mock config into dir and starts the mock on a free port. On
// error no mock runs.
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
		return nil, fmt.Errorf("write metadata mock config: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("find a port for the metadata mock: %w", err)
	}
	m.port = port
	// No spot notice until one is asked for: the mock would otherwise announce one at once.
	if err := m.start(ctx, "2099-01-01T00:00:00Z"); err != nil {
		return nil, err
	}
	return m, nil
}

// start starts the mock announcing a spot interruption at spotAt and waits until it answers. On
// any error it leaves no mock running.
func (m *metadataMock) start(ctx context.Context, spotAt string) error {
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open metadata mock log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(m.bin, "-n", "127.0.0.1", "-p", strconv.Itoa(m.port), "-I", "-c", m.conf, "--mock-trigger-time", spotAt)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = filepath.Dir(m.conf)
	cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(m.conf)) // the mock looks for a config in $HOME too
	cmd.SysProcAttr = procAttr(false, syscall.SIGKILL)           // dies with the simulator
	done, err := startLocked(cmd)
	if err != nil {
		return fmt.Errorf("start metadata mock: %w", err)
	}
	m.cmd, m.done = cmd, done
	if err := m.awaitAnswer(ctx); err != nil {
		m.stop()
		return err
	}
	return nil
}

// awaitAnswer waits until the mock hands out an IMDSv2 token.
func (m *metadataMock) awaitAnswer(ctx context.Context) error {
	deadline := time.Now().Add(metadataStartTimeout)
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
			return fmt.Errorf("wait for the metadata mock on port %d: %w", m.port, ctx.Err())
		case <-m.done:
			return fmt.Errorf("metadata mock exited at start; see %s", m.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("metadata mock on port %d did not answer within %s; see %s", m.port, metadataStartTimeout, m.log)
}

func (m *metadataMock) url() string { return "http://127.0.0.1:" + strconv.Itoa(m.port) }

// stop kills the mock, if one runs, and waits until it is gone.
func (m *metadataMock) stop() {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.done
	m.cmd, m.done = nil, nil
}

// interrupt restarts the mock announcing a spot interruption from now on. If the restart fails,
// no mock runs.
func (m *metadataMock) interrupt(ctx context.Context) error {
	m.stop()
	if err := m.start(ctx, time.Now().UTC().Format(time.RFC3339)); err != nil {
		return fmt.Errorf("restart the metadata mock with a spot notice: %w", err)
	}
	return nil
}
