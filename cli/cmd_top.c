/* cmd_top.c - bramble top: a live ncurses view of the nodes, jobs and events.
 * ncurses is loaded here, when top starts, not linked: every other command (a
 * shell loop of bramble submit, say) then starts without mapping and relocating
 * it and libtinfo. */
#include <curses.h>
#include <dlfcn.h>
#include <getopt.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

#define TOP_EVENTS_KEEP 30  /* events kept for the bottom of the screen */
#define TOP_EVENTS_PAGE 200 /* event.list limit per request */
#define TOP_EVENTS_PAGES 20 /* pages read per refresh at most */
#define TOP_STEP_CALLS 3    /* job.show calls per refresh at most */
#define TOP_RPC_MS 2000     /* longest wait for one answer (less with --timeout) */
#define TOP_NEWS_MS 100     /* the soonest a redraw follows the one before, on news */
#define TOP_KEYS_MS 50      /* keys are read in slices this long, news between them */

typedef struct {
    cli_t *cli;
    int interval_ms;
    cli_watch_t watch; /* news of every event the caller may see */
    int rpc_ms;
    json_t *nodes;  /* node.list's array, or NULL */
    json_t *jobs;   /* job.list's array, or NULL */
    json_t *steps;  /* {"id": newest checkpoint step} of running jobs */
    json_t *events; /* the newest events, oldest first */
    json_int_t after;
    int answering;
    char reason[128];
} top_t;

static volatile sig_atomic_t top_stop;

static void on_signal(int sig)
{
    (void)sig;
    top_stop = 1;
}

/* ---- fetching */

/* One request; the answer's body, or NULL with t->reason set. */
static json_t *top_call(top_t *t, const char *type, json_t *body)
{
    br_err_t err = {0};
    json_t *r = br_client_call(t->cli->client, type, body, t->rpc_ms, &err);
    if (!r) {
        t->answering = 0;
        br_strlcpy(t->reason, err.text, sizeof(t->reason));
    }
    return r;
}

static void keep_events(top_t *t, json_t *events)
{
    size_t i;
    json_t *ev;
    json_array_foreach (events, i, ev) {
        json_t *eid = json_object_get(ev, "id");
        if (json_is_integer(eid) && json_integer_value(eid) > t->after)
            t->after = json_integer_value(eid);
        json_array_append(t->events, ev);
    }
    while (json_array_size(t->events) > TOP_EVENTS_KEEP)
        json_array_remove(t->events, 0);
}

/* Read the events after the cursor. Returns how many came, or -1. */
static int fetch_events(top_t *t)
{
    int total = 0;
    for (int page = 0; page < TOP_EVENTS_PAGES; page++) {
        json_t *r = top_call(t, "event.list",
                             json_pack("{s:I, s:i, s:i}", "after", t->after, "job", 0,
                                       "limit", TOP_EVENTS_PAGE));
        if (!r)
            return -1;
        json_t *events = json_object_get(r, "events");
        json_t *next = json_object_get(r, "next");
        size_t n = json_array_size(events);
        keep_events(t, events);
        if (json_is_integer(next) && json_integer_value(next) > t->after)
            t->after = json_integer_value(next);
        json_decref(r);
        total += (int)n;
        if (n < TOP_EVENTS_PAGE)
            break;
    }
    return total;
}

/* Replace *slot with the array at key of a new answer to type. */
static int fetch_list(top_t *t, const char *type, json_t *body, const char *key,
                      json_t **slot)
{
    json_t *r = top_call(t, type, body);
    if (!r)
        return -1;
    json_t *arr = json_object_get(r, key);
    json_decref(*slot);
    *slot = json_is_array(arr) ? json_incref(arr) : json_array();
    json_decref(r);
    return 0;
}

static json_t *newest_step(const json_t *job)
{
    json_t *cps = json_object_get(job, "checkpoints"), *cp, *best = NULL;
    size_t i;
    json_array_foreach (cps, i, cp) {
        json_t *s = json_object_get(cp, "step");
        if (json_is_integer(s) &&
            (!best || json_integer_value(s) > json_integer_value(best)))
            best = s;
    }
    return best;
}

/* The newest checkpoint step of the first few running jobs. */
static void fetch_steps(top_t *t)
{
    json_t *steps = json_object(), *job;
    size_t i;
    int calls = 0;
    json_array_foreach (t->jobs, i, job) {
        const char *state = json_string_value(json_object_get(job, "state"));
        json_t *id = json_object_get(job, "id");
        if (calls >= TOP_STEP_CALLS || !state || strcmp(state, "running") != 0 ||
            !json_is_integer(id))
            continue;
        calls++;
        json_t *r = top_call(t, "job.show", json_pack("{s:O}", "id", id));
        if (!r)
            break;
        json_t *step = newest_step(json_object_get(r, "job"));
        char key[32];
        snprintf(key, sizeof(key), "%" JSON_INTEGER_FORMAT, json_integer_value(id));
        if (step)
            json_object_set(steps, key, step);
        json_decref(r);
    }
    json_decref(t->steps);
    t->steps = steps;
}

static void fetch_all(top_t *t)
{
    t->answering = 1;
    if (fetch_events(t) < 0 ||
        fetch_list(t, "node.list", NULL, "nodes", &t->nodes) < 0 ||
        fetch_list(t, "job.list", json_pack("{s:b}", "all", 0), "jobs", &t->jobs) < 0)
        return;
    fetch_steps(t);
}

/* ---- drawing */

/* ---- ncurses, loaded */

#ifndef BR_CURSES_LIB
#define BR_CURSES_LIB "libncursesw.so.6"
#endif

/* What top uses of ncurses (curses.h gives the types and constants). */
static struct {
    WINDOW *(*initscr)(void);
    int (*endwin)(void);
    int (*cbreak)(void);
    int (*noecho)(void);
    int (*curs_set)(int);
    int (*keypad)(WINDOW *, bool);
    int (*wattr_on)(WINDOW *, attr_t, void *);
    int (*wattr_off)(WINDOW *, attr_t, void *);
    int (*wmove)(WINDOW *, int, int);
    int (*waddnstr)(WINDOW *, const char *, int);
    int (*werase)(WINDOW *);
    int (*wrefresh)(WINDOW *);
    void (*wtimeout)(WINDOW *, int);
    int (*wgetch)(WINDOW *);
    WINDOW **scr;
    int *lines, *cols;
} nc;

/* Load ncurses: the library the build found first, then the usual names. 0, or -1
 * after saying why. */
static int load_curses(const cli_t *cli)
{
    static const char *const names[] = {BR_CURSES_LIB, "libncursesw.so.6",
                                        "libncurses.so.6", "libncursesw.so.5",
                                        "libncurses.so.5"};
    void *h = NULL;
    for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return cli_err(cli, "bramble top needs ncurses (%s): %s", BR_CURSES_LIB,
                       dlerror()),
               -1;
    struct {
        void *dst;
        const char *name;
    } syms[] = {{&nc.initscr, "initscr"},   {&nc.endwin, "endwin"},
                {&nc.cbreak, "cbreak"},     {&nc.noecho, "noecho"},
                {&nc.curs_set, "curs_set"}, {&nc.keypad, "keypad"},
                {&nc.wattr_on, "wattr_on"}, {&nc.wattr_off, "wattr_off"},
                {&nc.wmove, "wmove"},       {&nc.waddnstr, "waddnstr"},
                {&nc.werase, "werase"},     {&nc.wrefresh, "wrefresh"},
                {&nc.wtimeout, "wtimeout"}, {&nc.wgetch, "wgetch"},
                {&nc.scr, "stdscr"},     {&nc.lines, "LINES"},
                {&nc.cols, "COLS"}};
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *p = dlsym(h, syms[i].name);
        if (!p) {
            cli_err(cli, "bramble top: ncurses (%s) has no %s", BR_CURSES_LIB,
                    syms[i].name);
            dlclose(h);
            return -1;
        }
        memcpy(syms[i].dst, &p, sizeof(p)); /* a data or function pointer alike */
    }
    return 0; /* kept loaded until exit */
}

static int count_state(const json_t *arr, const char *state)
{
    size_t i;
    json_t *v;
    int n = 0;
    json_array_foreach (arr, i, v) {
        const char *s = json_string_value(json_object_get(v, "state"));
        n += s && strcmp(s, state) == 0;
    }
    return n;
}

static void put_line(int row, int attr, const char *text)
{
    if (row < 0 || row >= *nc.lines)
        return;
    nc.wattr_on(*nc.scr, (attr_t)attr, NULL);
    if (nc.wmove(*nc.scr, row, 0) != ERR)
        nc.waddnstr(*nc.scr, text, *nc.cols);
    nc.wattr_off(*nc.scr, (attr_t)attr, NULL);
}

static void draw_header(const top_t *t)
{
    char line[512], now[16];
    time_t tt = time(NULL);
    struct tm tm;
    strftime(now, sizeof(now), "%H:%M:%S", localtime_r(&tt, &tm));
    if (t->answering)
        snprintf(line, sizeof(line),
                 "%s  %s  nodes %d ready %d lost  jobs %d running %d pending", now,
                 t->cli->cred.endpoint, count_state(t->nodes, "ready"),
                 count_state(t->nodes, "lost"), count_state(t->jobs, "running"),
                 count_state(t->jobs, "pending"));
    else
        snprintf(line, sizeof(line), "%s  %s  coordinator not answering (%s)", now,
                 t->cli->cred.endpoint, t->reason);
    put_line(0, A_REVERSE, line);
}

static void node_line(const json_t *node, char *line, size_t len)
{
    char name[64], state[32], arch[16], gpus[16], load[16], jobs[64];
    const char *st = json_string_value(json_object_get(node, "state"));
    cli_fmt_value(json_object_get(node, "name"), name, sizeof(name));
    cli_fmt_value(json_object_get(node, "state"), state, sizeof(state));
    cli_fmt_value(json_object_get(node, "arch"), arch, sizeof(arch));
    snprintf(gpus, sizeof(gpus), "%zu", json_array_size(json_object_get(node, "gpus")));
    json_t *l = json_object_get(node, "load");
    if (json_is_number(l) && st && strcmp(st, "lost") != 0)
        snprintf(load, sizeof(load), "%.2f", json_number_value(l));
    else
        snprintf(load, sizeof(load), "-");
    cli_fmt_list(json_object_get(node, "jobs"), ",", jobs, sizeof(jobs));
    snprintf(line, len, "%s %-20.20s %-9s %-8s %-4s %-5s %s",
             st && strcmp(st, "lost") == 0 ? "!" : " ", name, state, arch, gpus, load,
             jobs);
}

/* Draw the rows of a table from row; at most max rows. Returns the next row. */
static int draw_nodes(const top_t *t, int row, int max)
{
    char line[256];
    size_t i, n = json_array_size(t->nodes);
    json_t *node;
    put_line(row++, A_BOLD,
             "  NAME                 STATE     ARCH     GPUS LOAD  JOBS");
    json_array_foreach (t->nodes, i, node) {
        if ((int)i >= max - 1 && i + 1 < n) {
            snprintf(line, sizeof(line), "  ... %zu more nodes", n - i);
            put_line(row++, 0, line);
            break;
        }
        const char *st = json_string_value(json_object_get(node, "state"));
        node_line(node, line, sizeof(line));
        put_line(row++, st && strcmp(st, "lost") == 0 ? A_BOLD | A_REVERSE : 0, line);
    }
    return row;
}

static int job_ended(const json_t *job)
{
    const char *s = json_string_value(json_object_get(job, "state"));
    return s &&
           (!strcmp(s, "completed") || !strcmp(s, "failed") || !strcmp(s, "cancelled"));
}

static void job_line(const top_t *t, const json_t *job, char *line, size_t len)
{
    char id[32], name[64], state[32], attempt[16], nodes[128];
    const char *step;
    cli_fmt_value(json_object_get(job, "id"), id, sizeof(id));
    cli_fmt_value(json_object_get(job, "name"), name, sizeof(name));
    cli_fmt_value(json_object_get(job, "state"), state, sizeof(state));
    cli_fmt_value(json_object_get(job, "attempt"), attempt, sizeof(attempt));
    cli_fmt_list(json_object_get(job, "nodes"), ",", nodes, sizeof(nodes));
    char stepbuf[32];
    step = cli_fmt_value(json_object_get(t->steps, id), stepbuf, sizeof(stepbuf));
    snprintf(line, len, "  %-6s %-18.18s %-10s %-7s %-20.20s %s", id, name, state,
             attempt, nodes, step);
}

/* Active jobs first, then the recently ended ones. */
static int draw_jobs(const top_t *t, int row, int max)
{
    char line[320];
    int shown = 0, total = (int)json_array_size(t->jobs);
    put_line(row++, A_BOLD,
             "  ID     NAME               STATE      ATTEMPT NODE"
             "                 STEP");
    for (int ended = 0; ended < 2; ended++) {
        size_t i;
        json_t *job;
        json_array_foreach (t->jobs, i, job) {
            if (job_ended(job) != ended)
                continue;
            if (shown >= max - 1 && shown + 1 < total) {
                snprintf(line, sizeof(line), "  ... %d more jobs", total - shown);
                put_line(row, 0, line);
                return row + 1;
            }
            job_line(t, job, line, sizeof(line));
            put_line(row++, ended ? A_DIM : 0, line);
            shown++;
        }
    }
    return row;
}

static void draw_events(const top_t *t, int row, int max)
{
    size_t n = json_array_size(t->events), first = n > (size_t)max ? n - max : 0;
    put_line(row++, A_BOLD, "EVENTS");
    for (size_t i = first; i < n; i++) {
        const json_t *ev = json_array_get(t->events, i);
        char when[32], job[32], node[64], state[32], reason[256], line[512];
        cli_fmt_time(json_object_get(ev, "time"), when, sizeof(when));
        cli_fmt_value(json_object_get(ev, "job"), job, sizeof(job));
        cli_fmt_value(json_object_get(ev, "node"), node, sizeof(node));
        cli_fmt_value(json_object_get(ev, "state"), state, sizeof(state));
        cli_fmt_value(json_object_get(ev, "reason"), reason, sizeof(reason));
        snprintf(line, sizeof(line), "  %s  %-5s %-12s %-10s %s", when + 11, job, node,
                 state, reason);
        put_line(row++, 0, line);
    }
}

/* Rows a table wants: its header and one row each (at least one). */
static int want_rows(const json_t *arr)
{
    size_t n = json_array_size(arr);
    return 1 + (n ? (int)n : 1);
}

/* 80x24: header, nodes, jobs, and the newest events in the rows left (at least
 * 5 on a terminal of 20 rows or more). */
static void draw(const top_t *t)
{
    int lines = *nc.lines;
    nc.werase(*nc.scr);
    draw_header(t);
    int min_ev = lines >= 20 ? 5 : lines >= 12 ? 2 : 0;
    int body = lines - 2 - (min_ev ? min_ev + 2 : 0); /* rows for both tables */
    int node_rows = want_rows(t->nodes), job_rows = want_rows(t->jobs);
    if (node_rows + job_rows + 1 > body) {
        node_rows = node_rows < body / 2 ? node_rows : body / 2;
        node_rows = node_rows < 2 ? 2 : node_rows;
        job_rows = body - node_rows - 1;
    }
    int row = draw_nodes(t, 2, node_rows);
    row = draw_jobs(t, row + 1, job_rows);
    int nev = lines - row - 2;
    if (min_ev && nev > 0)
        draw_events(t, row + 1, nev);
    nc.wrefresh(*nc.scr);
}

/* ---- the loop */

/* Wait up to the interval for keys, or less when the coordinator has news (an
 * event: a job started or ended, a node was lost; event.watch); 1 when the user
 * quits. */
static int wait_keys(top_t *t)
{
    int64_t start = br_mono_ms(), until = start + t->interval_ms;
    for (;;) {
        int64_t left = until - br_mono_ms();
        if (top_stop)
            return 1;
        if (left <= 0)
            return 0;
        /* news draws at once, but not more often than every TOP_NEWS_MS */
        if (t->cli->client && t->watch.state >= 0 && br_mono_ms() - start >= TOP_NEWS_MS &&
            cli_watch_wait(t->cli, &t->watch, 0))
            return 0;
        nc.wtimeout(*nc.scr, (int)(left < TOP_KEYS_MS ? left : TOP_KEYS_MS));
        int c = nc.wgetch(*nc.scr);
        if (c == 'q' || c == 'Q')
            return 1;
        if (c == KEY_RESIZE)
            draw(t);
    }
}

static void top_loop(top_t *t)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    nc.initscr();
    nc.cbreak();
    nc.noecho();
    nc.curs_set(0);
    nc.keypad(*nc.scr, TRUE);
    do {
        fetch_all(t);
        draw(t);
    } while (!wait_keys(t) && !top_stop);
    nc.endwin();
}

static int cmd_top(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"interval", required_argument, NULL, 'i'},
                                         {0}};
    int64_t interval = 1000;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c != 'i')
            return cli_bad_option(cli, c, argv);
        if (cli_parse_ms(cli, "--interval", optarg, &interval) != 0)
            return CLI_USAGE;
        if (interval < 100)
            return cli_usage(cli, "--interval must be at least 100ms");
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    if (!isatty(STDOUT_FILENO))
        return cli_err(cli,
                       "bramble top needs a terminal; use bramble events -f "
                       "for a stream"),
               CLI_USAGE;
    if (load_curses(cli) < 0 || !cli_client(cli))
        return CLI_FAIL;
    top_t t = {.cli = cli,
               .interval_ms = (int)interval,
               .events = json_array(),
               .watch = {.job = 0, .poll_ms = (int)interval}};
    t.rpc_ms = cli->timeout_ms < TOP_RPC_MS ? cli->timeout_ms : TOP_RPC_MS;
    top_loop(&t);
    json_decref(t.nodes);
    json_decref(t.jobs);
    json_decref(t.steps);
    json_decref(t.events);
    return CLI_OK;
}

const cli_cmd_t cli_top_cmds[] = {
    {NULL, "top", cmd_top, "[--interval DURATION]",
     "a live terminal view of the nodes, jobs and latest events",
     "Refreshes every interval from node.list, job.list and the event stream, and\n"
     "at once when the coordinator tells of an event (a job started or ended, a\n"
     "node lost). Lost nodes are marked '!'. Keys: q quits. Needs a terminal (for\n"
     "a stream of lines use 'bramble events -f').\n"
     "\nOptions:\n"
     "  --interval DURATION   time between refreshes (default 1s, at least 100ms)\n"},
    {0},
};
