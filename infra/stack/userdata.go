package stack

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/infra/config"
)

// userData installs the agent: the runner user (unprivileged, no groups, no subordinate ids: with
// them a job could hide under other uids, and the agent refuses to serve), the agent binary from
// the stack's S3 asset checked against the SHA-256 computed at synth, and a systemd unit that
// restarts it and delegates its cgroup to it (each run gets a cgroup of its own below it). Nothing comes from the internet: S3 is reachable through a gateway endpoint.
func userData(h *hangar, p *config.Pool, ag agent) *string {
	user := p.Runner.User
	if user == "" {
		user = "runner"
	}
	head := fmt.Sprintf(`#!/bin/bash
set -euo pipefail
id -u %[1]s >/dev/null 2>&1 || useradd --create-home --shell /bin/bash -K SUB_UID_COUNT=0 -K SUB_GID_COUNT=0 %[1]s
install -d -m 0755 /usr/local/bin
aws s3 cp --only-show-errors --region `, user)
	mid := ` "s3://`
	tail := fmt.Sprintf(`" /usr/local/bin/hangar-agent.new
echo "%[1]s  /usr/local/bin/hangar-agent.new" | sha256sum --check --quiet -
install -m 0755 -o root -g root /usr/local/bin/hangar-agent.new /usr/local/bin/hangar-agent
rm -f /usr/local/bin/hangar-agent.new
cat >/etc/systemd/system/hangar-agent.service <<'UNIT'
[Unit]
Description=Hangar agent
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=/usr/local/bin/hangar-agent --stack %[2]s --pool %[3]s
Restart=always
RestartSec=2
Delegate=yes

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now hangar-agent.service
`, ag.sha256, h.cfg.Stack, p.Name)
	if strings.ContainsAny(h.cfg.Stack+p.Name+user, "'\"$`\\ ") {
		panic("validated names contain shell characters") // config validation forbids them
	}
	return awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String(head), h.stack.Region(), jsii.String(mid),
		ag.asset.S3BucketName(), jsii.String("/"), ag.asset.S3ObjectKey(), jsii.String(tail)})
}
