/* A stand-in for libcuda.so.1 for CPU-only tests: the checkpoint API as a
 * state machine over made-up process ids, with failures the test injects and
 * a record of the argument bytes each call received. The fake_* functions are
 * the test's controls. */
#include <pthread.h>
#include <string.h>

#define MAX_PROCS 64
#define MAX_FAILS 64
#define MAX_PAIRS 16

enum { OP_GET_STATE, OP_LOCK, OP_CHECKPOINT, OP_RESTORE, OP_UNLOCK, OP_RESTORE_TID, OP_INIT, NUM_OPS };

enum {
	RUNNING = 0, LOCKED = 1, CHECKPOINTED = 2, FAILED = 3,
};

enum {
	SUCCESS = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, NO_DEVICE = 100,
	OPERATING_SYSTEM = 304, ILLEGAL_STATE = 401, NOT_SUPPORTED = 801, TIMEOUT = 909,
};

struct proc { int pid, state, busy; };
struct fail { int op, pid, code; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct proc procs[MAX_PROCS];
static int nprocs;
static struct fail fails[MAX_FAILS];
static int nfails;
static int driver_version = 13000;
static int init_result = SUCCESS;
static int calls[NUM_OPS];
static unsigned char last_args[NUM_OPS][64];
static unsigned char last_pairs[MAX_PAIRS * 32];
static unsigned last_pairs_count;

static struct proc *find(int pid) {
	for (int i = 0; i < nprocs; i++)
		if (procs[i].pid == pid) return &procs[i];
	return 0;
}

/* injected returns the code a test asked op on pid to fail with, once. */
static int injected(int op, int pid) {
	for (int i = 0; i < nfails; i++) {
		if (fails[i].op == op && (fails[i].pid == pid || fails[i].pid == 0)) {
			int code = fails[i].code;
			fails[i] = fails[--nfails];
			return code;
		}
	}
	return SUCCESS;
}

static int begin(int op, int pid, const void *args, struct proc **p) {
	calls[op]++;
	if (args) memcpy(last_args[op], args, 64);
	else memset(last_args[op], 0xff, 64);
	int code = injected(op, pid);
	if (code) return code;
	*p = find(pid);
	if (!*p) return pid <= 0 ? OPERATING_SYSTEM : NOT_INITIALIZED;
	return SUCCESS;
}

static int transition(int op, int pid, const void *args, int from, int to) {
	struct proc *p;
	pthread_mutex_lock(&mu);
	int rc = begin(op, pid, args, &p);
	if (rc == SUCCESS) {
		if (p->state != from) rc = ILLEGAL_STATE;
		else p->state = to;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

int cuInit(unsigned flags) {
	pthread_mutex_lock(&mu);
	calls[OP_INIT]++;
	int rc = flags ? INVALID_VALUE : init_result;
	pthread_mutex_unlock(&mu);
	return rc;
}

int cuDriverGetVersion(int *v) {
	if (!v) return INVALID_VALUE;
	*v = driver_version;
	return SUCCESS;
}

int cuGetErrorName(int code, const char **s) {
	switch (code) {
	case SUCCESS: *s = "CUDA_SUCCESS"; return SUCCESS;
	case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return SUCCESS;
	case NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; return SUCCESS;
	case NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return SUCCESS;
	case OPERATING_SYSTEM: *s = "CUDA_ERROR_OPERATING_SYSTEM"; return SUCCESS;
	case ILLEGAL_STATE: *s = "CUDA_ERROR_ILLEGAL_STATE"; return SUCCESS;
	case NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; return SUCCESS;
	case TIMEOUT: *s = "CUDA_ERROR_TIMEOUT"; return SUCCESS;
	}
	*s = 0;
	return INVALID_VALUE;
}

int cuGetErrorString(int code, const char **s) {
	switch (code) {
	case SUCCESS: *s = "no error"; return SUCCESS;
	case INVALID_VALUE: *s = "invalid argument"; return SUCCESS;
	case NOT_INITIALIZED: *s = "initialization error"; return SUCCESS;
	case NO_DEVICE: *s = "no CUDA-capable device is detected"; return SUCCESS;
	case OPERATING_SYSTEM: *s = "OS call failed or operation not supported on this OS"; return SUCCESS;
	case ILLEGAL_STATE: *s = "the operation cannot be performed in the present state"; return SUCCESS;
	case NOT_SUPPORTED: *s = "operation not supported"; return SUCCESS;
	case TIMEOUT: *s = "the operation timed out"; return SUCCESS;
	}
	*s = 0;
	return INVALID_VALUE;
}

#ifndef NO_CHECKPOINT_API
int cuCheckpointProcessGetState(int pid, int *state) {
	struct proc *p;
	pthread_mutex_lock(&mu);
	int rc = begin(OP_GET_STATE, pid, 0, &p);
	if (rc == SUCCESS) *state = p->state;
	pthread_mutex_unlock(&mu);
	return rc;
}

int cuCheckpointProcessGetRestoreThreadId(int pid, int *tid) {
	struct proc *p;
	pthread_mutex_lock(&mu);
	int rc = begin(OP_RESTORE_TID, pid, 0, &p);
	if (rc == SUCCESS) *tid = pid + 1;
	pthread_mutex_unlock(&mu);
	return rc;
}

int cuCheckpointProcessLock(int pid, const void *args) {
	struct proc *p;
	pthread_mutex_lock(&mu);
	int rc = begin(OP_LOCK, pid, args, &p);
	if (rc == SUCCESS) {
		unsigned timeout;
		memcpy(&timeout, args, 4);
		if (p->state != RUNNING) rc = ILLEGAL_STATE;
		else if (p->busy) rc = timeout ? TIMEOUT : ILLEGAL_STATE;
		else p->state = LOCKED;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

int cuCheckpointProcessCheckpoint(int pid, const void *args) {
	return transition(OP_CHECKPOINT, pid, args, LOCKED, CHECKPOINTED);
}

int cuCheckpointProcessRestore(int pid, const void *args) {
	const unsigned char *a = args;
	void *pairs;
	unsigned count;
	memcpy(&pairs, a, 8);
	memcpy(&count, a + 8, 4);
	pthread_mutex_lock(&mu);
	if (count > 0 && count <= MAX_PAIRS && pairs) {
		memcpy(last_pairs, pairs, count * 32);
		last_pairs_count = count;
	}
	int bad = (count > 0 && (driver_version < 13000 || !pairs || count > MAX_PAIRS));
	pthread_mutex_unlock(&mu);
	if (bad) {
		calls[OP_RESTORE]++;
		return INVALID_VALUE;
	}
	return transition(OP_RESTORE, pid, args, CHECKPOINTED, LOCKED);
}

int cuCheckpointProcessUnlock(int pid, const void *args) {
	return transition(OP_UNLOCK, pid, args, LOCKED, RUNNING);
}

#endif /* NO_CHECKPOINT_API */

/* Controls for tests. */

void fake_reset(void) {
	pthread_mutex_lock(&mu);
	nprocs = nfails = 0;
	driver_version = 13000;
	init_result = SUCCESS;
	memset(calls, 0, sizeof calls);
	memset(last_args, 0, sizeof last_args);
	last_pairs_count = 0;
	pthread_mutex_unlock(&mu);
}

void fake_set_driver_version(int v) { driver_version = v; }
void fake_set_init_result(int rc) { init_result = rc; }

int fake_add_process(int pid, int state) {
	pthread_mutex_lock(&mu);
	int ok = nprocs < MAX_PROCS;
	if (ok) procs[nprocs++] = (struct proc){pid, state, 0};
	pthread_mutex_unlock(&mu);
	return ok;
}

void fake_set_busy(int pid, int busy) {
	pthread_mutex_lock(&mu);
	struct proc *p = find(pid);
	if (p) p->busy = busy;
	pthread_mutex_unlock(&mu);
}

/* fake_fail makes the next call of op on pid (0: any pid) return code. */
int fake_fail(int op, int pid, int code) {
	pthread_mutex_lock(&mu);
	int ok = nfails < MAX_FAILS;
	if (ok) fails[nfails++] = (struct fail){op, pid, code};
	pthread_mutex_unlock(&mu);
	return ok;
}

int fake_state(int pid) {
	pthread_mutex_lock(&mu);
	struct proc *p = find(pid);
	int s = p ? p->state : -1;
	pthread_mutex_unlock(&mu);
	return s;
}

int fake_calls(int op) { return calls[op]; }
void fake_last_args(int op, unsigned char *out) { memcpy(out, last_args[op], 64); }
unsigned fake_last_pairs(unsigned char *out) {
	memcpy(out, last_pairs, last_pairs_count * 32);
	return last_pairs_count;
}
