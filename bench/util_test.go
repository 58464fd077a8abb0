package bench

import (
	"log/slog"
	"os"
)

type slogLogger = slog.Logger

func osGetpid() int { return os.Getpid() }
