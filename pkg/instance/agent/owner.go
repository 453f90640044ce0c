package agent

import (
	"os"
	"syscall"
)

func ownedByRoot(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && sys.Uid == 0
}
