package engine

// The names of the engine's steps, as an Observer sees them (Step.Name)
// and as stasisd's failpoints and crash tests name them
// (service.Failpoint). docs/design.md's tables say what each does and what
// its failure leaves.
const (
	StepPreflight     = "preflight"
	StepGPUSuspend    = "gpu-suspend"
	StepDetachDevices = "detach-devices"
	StepCheckpoint    = "checkpoint"
	StepCommit        = "commit"
	StepFreeze        = "freeze"
	StepStop          = "stop"
	StepDelete        = "delete"
	StepPause         = "pause"
	StepCopy          = "copy"
	StepVerify        = "verify"
	StepVerifyBlocks  = "verify-blocks"
	StepCompatibility = "compatibility"
	StepRestore       = "restore"
	StepRestoreData   = "restore-data"
	StepBoot          = "boot"
	StepAttachDevices = "attach-devices"
	StepUnpause       = "unpause"
	StepGPUResume     = "gpu-resume"
	StepProbe         = "probe"
	// StepArrived waits, after a restore from a folder whose bytes were
	// still arriving (ResumeOptions.Arriving), for the rest of them.
	StepArrived = "arrived"
	// StepCleanup removes what a failed step left (a sandbox half made).
	StepCleanup = "cleanup"
)
