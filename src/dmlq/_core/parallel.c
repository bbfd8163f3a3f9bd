/* Running a task on several threads.
 *
 * On POSIX systems: a small pool of worker threads that spin briefly (about 0.1 ms) for the next
 * task, then sleep, so that an idle dmlq does not take CPU time from whatever runs next (OpenMP
 * runtimes spin for milliseconds). Only one task uses the pool at a time; a task started while it
 * is busy (another Python thread) runs on its caller's thread alone. A forked child starts a fresh
 * pool. Elsewhere: OpenMP when the compiler has it, else one thread.
 *
 * Every task claims its work in units (dmlq_claim), so the caller alone can do all of it: once the
 * caller has finished, workers that have not joined yet (descheduled on a busy machine, or still
 * waking) are turned away instead of waited for, and the call returns without a scheduler turn.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getcpu and the CPU sets of sched_setaffinity */
#endif
#include "common.h"

static int thread_count = 1;

int dmlq_num_threads(void) { return thread_count; }

void dmlq_set_num_threads(int threads) { thread_count = threads < 1 ? 1 : threads; }

#if !defined(_WIN32) && (defined(__GNUC__) || defined(__clang__))

#include <pthread.h>
#include <sched.h>

enum { SPIN_ROUNDS = 20000, MAX_WORKERS = 255 };

static inline void relax(void) {
#if DMLQ_X86
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static struct {
    pthread_mutex_t busy;        /* held by the task using the pool */
    pthread_mutex_t lock;        /* guards the sleeping counts and the condition variables */
    pthread_cond_t wake, finished;
    int workers, sleeping_workers, caller_sleeping;
    unsigned long generation;    /* incremented per task, atomically */
    unsigned long created_at;    /* the generation new workers start after */
    dmlq_task task;
    void *context;
    int threads;
    unsigned long long admission; /* the task's generation << 32 | CLOSED | workers admitted, atomically */
    int finished_workers;         /* admitted workers done with the task, atomically */
    int barrier_count, barrier_sense;
    int caller_cpu;               /* the CPU the task's caller ran on when it started it, or -1, atomically */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER};

/* Spin a while, then sleep on `condition` until done() holds. `sleeping` counts the sleepers so
 * that wakers take the lock only when someone sleeps. */
static void wait_until(int (*done)(const void *), const void *argument, pthread_cond_t *condition, int *sleeping) {
    for (int round = 0; round < SPIN_ROUNDS; round++) {
        if (done(argument)) return;
        relax();
    }
    pthread_mutex_lock(&pool.lock);
    __atomic_add_fetch(sleeping, 1, __ATOMIC_SEQ_CST);
    while (!done(argument)) pthread_cond_wait(condition, &pool.lock);
    __atomic_sub_fetch(sleeping, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&pool.lock);
}

static void wake_all(pthread_cond_t *condition, const int *sleeping) {
    if (__atomic_load_n(sleeping, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(condition);
        pthread_mutex_unlock(&pool.lock);
    }
}

static int generation_changed(const void *seen) {
    return __atomic_load_n(&pool.generation, __ATOMIC_SEQ_CST) != *(const unsigned long *)seen;
}

#define CLOSED (1ull << 31)
#define ADMITTED_MASK (CLOSED - 1)

static unsigned long long admission_of(unsigned long generation) {
    return (unsigned long long)(uint32_t)generation << 32;
}

/* Whether a worker may join the task of `generation`: it is still the current one and open. */
static int admitted(unsigned long generation) {
    unsigned long long seen = __atomic_load_n(&pool.admission, __ATOMIC_SEQ_CST);
    while ((seen & ~ADMITTED_MASK) == admission_of(generation))
        if (__atomic_compare_exchange_n(&pool.admission, &seen, seen + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return 1;
    return 0;
}

static int workers_finished(const void *admitted_workers) {
    return __atomic_load_n(&pool.finished_workers, __ATOMIC_SEQ_CST) == *(const int *)admitted_workers;
}

/* The CPU this thread runs on, or -1 where it cannot be known. */
static int current_cpu(void) {
#ifdef __linux__
    return sched_getcpu();
#else
    return -1;
#endif
}

/* Off the caller's CPU. Linux may wake a worker on the CPU of the thread that woke it although
 * another is idle; the two then share one CPU until the scheduler balances them, which took longer
 * than the task: 1000 us for 500 us of work, measured on 2 cores. Taking that CPU out of the
 * worker's affinity moves it at once; its own affinity is then restored. */
static void leave_cpu(int cpu) {
#ifdef __linux__
    cpu_set_t allowed, others;
    if (cpu < 0 || sched_getcpu() != cpu || sched_getaffinity(0, sizeof allowed, &allowed)) return;
    others = allowed;
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) > 0 && sched_setaffinity(0, sizeof others, &others) == 0)
        sched_setaffinity(0, sizeof allowed, &allowed);
#else
    (void)cpu;
#endif
}

static void *worker(void *argument) {
    const int index = (int)(intptr_t)argument;
    unsigned long seen = pool.created_at; /* not pool.generation: the task may have started already */
    for (;;) {
        wait_until(generation_changed, &seen, &pool.wake, &pool.sleeping_workers);
        seen = __atomic_load_n(&pool.generation, __ATOMIC_SEQ_CST);
        leave_cpu(__atomic_load_n(&pool.caller_cpu, __ATOMIC_SEQ_CST));
        if (!admitted(seen)) continue; /* the caller finished without this worker */
        if (index < pool.threads) pool.task(pool.context, index, pool.threads);
        __atomic_add_fetch(&pool.finished_workers, 1, __ATOMIC_SEQ_CST);
        wake_all(&pool.finished, &pool.caller_sleeping);
    }
    return NULL;
}

/* Workers 1..threads-1 (the caller is thread 0); returns how many exist. */
static int start_workers(int threads) {
    pool.created_at = pool.generation;
    while (pool.workers < threads - 1 && pool.workers < MAX_WORKERS) {
        pthread_t thread;
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&thread, &attributes, worker, (void *)(intptr_t)(pool.workers + 1));
        pthread_attr_destroy(&attributes);
        if (failed) break;
        pool.workers++;
    }
    return pool.workers;
}

static void before_fork(void) { pthread_mutex_lock(&pool.busy); }

static void after_fork_in_parent(void) { pthread_mutex_unlock(&pool.busy); }

static void after_fork_in_child(void) {
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.finished, NULL);
    pool.workers = pool.sleeping_workers = pool.caller_sleeping = 0;
    pool.admission = 0;
}

void dmlq_threads_init(void) { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); }

void dmlq_parallel(dmlq_task task, void *context, int threads) {
    if (threads > 1 && pthread_mutex_trylock(&pool.busy) == 0) {
        const int workers = start_workers(threads);
        if (threads > workers + 1) threads = workers + 1;
        if (threads > 1) {
            pool.task = task;
            pool.context = context;
            pool.threads = threads;
            pool.barrier_count = 0;
            __atomic_store_n(&pool.finished_workers, 0, __ATOMIC_SEQ_CST);
            __atomic_store_n(&pool.caller_cpu, current_cpu(), __ATOMIC_SEQ_CST);
            __atomic_store_n(&pool.admission, admission_of(pool.generation + 1), __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&pool.generation, 1, __ATOMIC_SEQ_CST);
            wake_all(&pool.wake, &pool.sleeping_workers);
            task(context, 0, threads);
            const int admitted_workers = (int)(__atomic_fetch_or(&pool.admission, CLOSED, __ATOMIC_SEQ_CST) & ADMITTED_MASK);
            wait_until(workers_finished, &admitted_workers, &pool.finished, &pool.caller_sleeping);
            pthread_mutex_unlock(&pool.busy);
            return;
        }
        pthread_mutex_unlock(&pool.busy);
    }
    task(context, 0, 1);
}

/* A sense-reversing barrier among the current task's threads; it yields the CPU while it waits,
 * so a descheduled thread gets it back. */
void dmlq_barrier(int threads) {
    if (threads <= 1) return;
    const int sense = __atomic_load_n(&pool.barrier_sense, __ATOMIC_SEQ_CST);
    if (__atomic_add_fetch(&pool.barrier_count, 1, __ATOMIC_SEQ_CST) == threads) {
        __atomic_store_n(&pool.barrier_count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&pool.barrier_sense, !sense, __ATOMIC_SEQ_CST);
        return;
    }
    for (int round = 0; __atomic_load_n(&pool.barrier_sense, __ATOMIC_SEQ_CST) == sense; round++) {
        if (round < SPIN_ROUNDS)
            relax();
        else
            sched_yield();
    }
}

#else /* Windows (or a compiler without pthreads here): OpenMP when the compiler has it, else one thread */

#ifdef _OPENMP
#include <omp.h>
#endif

void dmlq_threads_init(void) {}

void dmlq_parallel(dmlq_task task, void *context, int threads) {
#ifdef _OPENMP
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        task(context, omp_get_thread_num(), omp_get_num_threads());
        return;
    }
#endif
    (void)threads;
    task(context, 0, 1);
}

void dmlq_barrier(int threads) {
    (void)threads;
#ifdef _OPENMP
#pragma omp barrier
#endif
}

#endif

/* Threads of a task and Python threads that released the GIL share these: atomic with every compiler
 * (GCC, clang and clang-cl have the __atomic builtins, MSVC its Interlocked intrinsics). */
#if defined(__GNUC__) || defined(__clang__)

ptrdiff_t dmlq_claim(ptrdiff_t *counter) { return __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

int dmlq_take_flag(long *flag) { return __atomic_exchange_n(flag, 1L, __ATOMIC_ACQUIRE) == 0; }

void dmlq_give_flag(long *flag) { __atomic_store_n(flag, 0L, __ATOMIC_RELEASE); }

#else

#include <intrin.h>

ptrdiff_t dmlq_claim(ptrdiff_t *counter) {
    return (ptrdiff_t)_InterlockedExchangeAdd64((volatile long long *)counter, 1);
}

int dmlq_take_flag(long *flag) { return _InterlockedExchange((volatile long *)flag, 1L) == 0; }

void dmlq_give_flag(long *flag) { _InterlockedExchange((volatile long *)flag, 0L); }

#endif
