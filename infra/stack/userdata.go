package stack

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3assets"
	"github.com/aws/jsii-runtime-go"

	"github.com/hangar-ci/hangar/infra/config"
)

// imageScript installs what the image contract needs and a stock image lacks.
//
//go:embed image.sh
var imageScript string

// userData installs the agent: the runner user (unprivileged, no login shell, no groups, no
// subordinate ids: with a shell a job could log in beside its run, with subordinate ids hide under
// other uids, and the agent refuses to serve either), the agent binary and its helper hangar-runas (which starts the runner's scripts as the runner user) from the stack's
// S3 assets, each checked against the SHA-256 computed at synth, and a systemd unit that
// restarts the agent and delegates its cgroup to it (each run gets a cgroup of its own below it).
// Before them, the image contract's pieces a stock image lacks are installed (image.sh).
func userData(h *hangar, p *config.Pool, ag agent) *string {
	user := p.Runner.User
	if user == "" {
		user = "runner"
	}
	if strings.ContainsAny(h.cfg.Stack+p.Name+user, "'\"$`\\ ") {
		panic("validated names contain shell characters") // config validation forbids them
	}
	parts := []*string{jsii.String(fmt.Sprintf(`#!/bin/bash
set -euo pipefail
%[2]s
id -u %[1]s >/dev/null 2>&1 || useradd --create-home --shell /usr/sbin/nologin -K SUB_UID_COUNT=0 -K SUB_GID_COUNT=0 %[1]s
install -d -m 0755 /usr/local/bin
`, user, imageScript))}
	for _, b := range []struct {
		name  string
		asset awss3assets.Asset
	}{{"hangar-agent", ag.asset}, {"hangar-runas", ag.helper}} {
		parts = append(parts, jsii.String("aws s3 cp --only-show-errors --region "), h.stack.Region(), jsii.String(` "s3://`),
			b.asset.S3BucketName(), jsii.String("/"), b.asset.S3ObjectKey(), jsii.String(`" /usr/local/bin/`+b.name+".new\n"))
	}
	parts = append(parts, jsii.String(fmt.Sprintf(`sha256sum --check --quiet - <<'SUMS'
%[1]s  /usr/local/bin/hangar-agent.new
%[2]s  /usr/local/bin/hangar-runas.new
SUMS
install -m 0755 -o root -g root /usr/local/bin/hangar-runas.new /usr/local/bin/hangar-runas
install -m 0755 -o root -g root /usr/local/bin/hangar-agent.new /usr/local/bin/hangar-agent
rm -f /usr/local/bin/hangar-agent.new /usr/local/bin/hangar-runas.new
cat >/etc/systemd/system/hangar-agent.service <<'UNIT'
[Unit]
Description=Hangar agent
After=network-online.target ssh.service sshd.service
Wants=network-online.target

[Service]
ExecStart=/usr/local/bin/hangar-agent --stack %[3]s --pool %[4]s
Restart=always
RestartSec=2
Delegate=yes

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now hangar-agent.service
`, ag.sha256, ag.helperSHA256, h.cfg.Stack, p.Name)))
	return awscdk.Fn_Join(jsii.String(""), &parts)
}
