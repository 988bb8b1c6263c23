/* cmd_class.c - bramble class create|remove|list: a class of students, made,
 * listed and removed together. A class is no object of the coordinator's: it is
 * the users named NAME-<number>, each made as user add makes one (usercred.h),
 * with the same limits (limits.h). The requests of a class go out several at a
 * time on the one connection, so that the coordinator takes them together. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "limits.h"
#include "usercred.h"
#include "util.h"

#define CLASS_MAX_STUDENTS 1000
#define NAME_MAX_LEN 63 /* br_valid_name's */

/* 1 when user is klass-<digits> (as many digits as there are), with the number
 * in *n; else 0. */
static int student_number(const char *user, const char *klass, long *n)
{
    size_t k = strlen(klass);
    if (strncmp(user, klass, k) != 0 || user[k] != '-' || !user[k + 1])
        return 0;
    const char *d = user + k + 1;
    if (strspn(d, "0123456789") != strlen(d))
        return 0;
    *n = strtol(d, NULL, 10); /* LONG_MAX for a number too long: it still sorts last */
    return 1;
}

/* The class of user (what is before its last "-<digits>") into buf; 0 when the
 * name is no student's. */
static int class_of(const char *user, char *buf, size_t len)
{
    const char *dash = strrchr(user, '-');
    if (!dash || dash == user || !dash[1] ||
        strspn(dash + 1, "0123456789") != strlen(dash + 1))
        return 0;
    size_t n = (size_t)(dash - user);
    if (n >= len)
        return 0;
    memcpy(buf, user, n);
    buf[n] = '\0';
    return 1;
}

/* The users (user.list): a new reference to the array, or NULL after saying why. */
static json_t *list_users(cli_t *cli)
{
    json_t *r = cli_call(cli, "user.list", NULL);
    if (!r)
        return NULL;
    json_t *users = json_incref(json_object_get(r, "users"));
    json_decref(r);
    if (!json_is_array(users)) {
        json_decref(users);
        cli_err(cli, "the coordinator's user list has no users");
        return NULL;
    }
    return users;
}

static int by_number(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    json_int_t a_n = json_integer_value(json_object_get(x, "n"));
    json_int_t b_n = json_integer_value(json_object_get(y, "n"));
    if (a_n != b_n)
        return a_n < b_n ? -1 : 1;
    return strcmp(json_string_value(json_object_get(x, "name")),
                  json_string_value(json_object_get(y, "name")));
}

/* The students of class klass among users, in their numbers' order: a new array
 * of the user objects (each with "n" added), or NULL when out of memory. */
static json_t *students_of(const json_t *users, const char *klass)
{
    json_t *out = json_array();
    size_t i;
    json_t *u;
    json_array_foreach(users, i, u) {
        const char *name = json_string_value(json_object_get(u, "name"));
        const char *kind = json_string_value(json_object_get(u, "kind"));
        long n;
        if (!name || !kind || strcmp(kind, "user") != 0 ||
            !student_number(name, klass, &n))
            continue;
        json_t *s = json_deep_copy(u);
        json_object_set_new(s, "n", json_integer(n));
        json_array_append_new(out, s);
    }
    size_t n = json_array_size(out);
    if (n < 2)
        return out;
    json_t **v = malloc(n * sizeof(*v));
    if (!v) {
        json_decref(out);
        return NULL;
    }
    for (i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(out, i));
    qsort(v, n, sizeof(*v), by_number);
    json_array_clear(out);
    for (i = 0; i < n; i++)
        json_array_append_new(out, v[i]);
    free(v);
    return out;
}

/* "cs-01 .. cs-30" (or one name) of a sorted array of students. */
static const char *names_text(const json_t *students, char *buf, size_t len)
{
    size_t n = json_array_size(students);
    const char *first =
        json_string_value(json_object_get(json_array_get(students, 0), "name"));
    const char *last =
        json_string_value(json_object_get(json_array_get(students, n - 1), "name"));
    if (n == 0)
        snprintf(buf, len, "none");
    else if (n == 1)
        snprintf(buf, len, "%s", first);
    else
        snprintf(buf, len, "%s .. %s", first, last);
    return buf;
}

/* ---- several requests in flight */

/* The body of request i (new reference; NULL: out of memory). */
typedef json_t *(*body_fn)(void *arg, int i, br_err_t *err);
/* Request i was answered with reply, or failed with err (reply NULL). 0, or -1
 * when it counts as a failure after all (then no more requests are sent). */
typedef int (*answer_fn)(void *arg, int i, const json_t *reply, const br_err_t *err);

/* Send requests from..n-1 of type, up to BR_CLIENT_PENDING in flight at once, and
 * hand each answer to answer in order. After the first failure no more are sent,
 * but the answers of those in flight are still taken. 0 when every one was
 * answered and taken, -1 on a failure (said by answer) or when there is no
 * connection (said). */
static int pipeline(cli_t *cli, const char *type, int from, int n, body_fn body,
                    answer_fn answer, void *arg)
{
    br_client_t *client = cli_client(cli);
    if (!client)
        return -1;
    uint32_t seq[BR_CLIENT_PENDING];
    int sent = from, taken = from, failed = 0;
    while (taken < sent || (sent < n && !failed)) {
        while (!failed && sent < n && sent - taken < BR_CLIENT_PENDING) {
            br_err_t err = {0};
            json_t *b = body(arg, sent, &err);
            if (!b || br_client_send(client, type, b, &seq[sent % BR_CLIENT_PENDING],
                                     &err) < 0) {
                answer(arg, sent, NULL, &err);
                failed = 1;
                break;
            }
            sent++;
        }
        if (taken == sent)
            break;
        br_msg_t *m = NULL;
        br_err_t err = {0};
        int rc = br_client_recv(client, seq[taken % BR_CLIENT_PENDING], cli->timeout_ms,
                                &m, &err);
        const json_t *reply = rc == 0 ? br_msg_body(m) : NULL;
        if (answer(arg, taken, reply, reply ? NULL : &err) < 0)
            failed = 1;
        br_msg_destroy(&m);
        taken++;
    }
    return failed ? -1 : 0;
}

/* ---- class create */

typedef struct {
    cli_t *cli;
    const char *klass, *dir, *endpoint;
    int width;
    json_t *limits;
    br_cred_t cred[BR_CLIENT_PENDING]; /* of the requests in flight */
    char failure[BR_ERR_TEXT + 200];   /* the first failure, in words */
} making_t;

static void student_name(const making_t *k, int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s-%0*d", k->klass, k->width, i + 1);
}

static json_t *make_body(void *arg, int i, br_err_t *err)
{
    making_t *k = arg;
    char name[NAME_MAX_LEN + 1];
    student_name(k, i, name, sizeof(name));
    br_cred_t *cred = &k->cred[i % BR_CLIENT_PENDING];
    if (br_keypair(cred->public_key, cred->secret_key, err) < 0)
        return NULL;
    br_strlcpy(cred->name, name, sizeof(cred->name));
    json_t *body =
        json_pack("{s:s, s:s}", "name", name, "public_key", cred->public_key);
    if (body && json_object_size(k->limits))
        json_object_set(body, "limits", k->limits);
    if (!body)
        br_errf(err, ENOMEM, "out of memory");
    return body;
}

static int made_one(void *arg, int i, const json_t *reply, const br_err_t *err)
{
    making_t *k = arg;
    br_cred_t *cred = &k->cred[i % BR_CLIENT_PENDING];
    char path[CLI_PATH_MAX];
    br_err_t werr;
    int rc = 0;
    if (!reply) {
        if (!k->failure[0])
            snprintf(k->failure, sizeof(k->failure), "%s: %s", cred->name, err->text);
        rc = -1;
    } else {
        cli_usercred_finish(k->cli, cred, k->endpoint, reply);
        snprintf(path, sizeof(path), "%s/%s.credential", k->dir, cred->name);
        if (br_cred_save(path, cred, &werr) < 0) {
            if (!k->failure[0])
                snprintf(k->failure, sizeof(k->failure),
                         "%s was made, but its credential could not be written: %s",
                         cred->name, werr.text);
            rc = -1;
        }
    }
    explicit_bzero(cred, sizeof(*cred));
    return rc;
}

/* DIR/README.txt: how a student uses their credential. */
static int write_readme(const making_t *k, int students, br_err_t *err)
{
    char path[CLI_PATH_MAX], first[NAME_MAX_LEN + 1], last[NAME_MAX_LEN + 1], lim[300];
    snprintf(path, sizeof(path), "%s/README.txt", k->dir);
    student_name(k, 0, first, sizeof(first));
    student_name(k, students - 1, last, sizeof(last));
    FILE *f = fopen(path, "w");
    if (!f)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    fprintf(
        f,
        "bramble: your credential for the class %s\n"
        "\n"
        "Each student has one credential, a file named after them: %s.credential\n"
        "to %s.credential. Take yours only, and keep it to yourself: whoever holds\n"
        "it is you to the cluster. It must stay readable by you alone (chmod 600\n"
        "FILE), or bramble refuses it.\n"
        "\n"
        "Give it to every command with --credential:\n"
        "\n"
        "    bramble --credential %s.credential submit job.yaml\n"
        "    bramble --credential %s.credential jobs       # your jobs\n"
        "    bramble --credential %s.credential queue      # why yours wait\n"
        "    bramble --credential %s.credential usage      # what you used\n"
        "\n"
        "or put it where bramble looks by itself, and leave --credential out:\n"
        "\n"
        "    mkdir -p ~/.config/bramble\n"
        "    cp %s.credential ~/.config/bramble/credential\n"
        "    chmod 600 ~/.config/bramble/credential\n"
        "\n"
        "A job's name must differ from those of every active job on the cluster,\n"
        "everyone's: put your name in yours (--set name=%s-train).\n"
        "\n"
        "You see, follow (bramble logs ID) and cancel (bramble cancel ID) your own\n"
        "jobs only. bramble queue lists your pending jobs in the order they will be\n"
        "placed, with each one's score and the reason it waits; a student who used\n"
        "little lately goes first (fair share).\n"
        "\n"
        "Your limits (the same for every student): %s.\n",
        k->klass, first, last, first, first, first, first, first, first,
        cli_limits_text(k->limits, lim, sizeof(lim)));
    static const struct {
        const char *key, *flag, *text;
    } says[] = {
        {"max_gpus", "max-gpus",
         "GPUs your running jobs hold at once; a job that needs more is refused"},
        {"max_jobs", "max-jobs", "jobs running at once; more wait their turn"},
        {"max_pending", "max-pending", "jobs waiting at once; more are refused"},
        {"gpu_hours_week", "gpu-hours-week",
         "GPU-hours in the last 7 days; then GPU jobs wait"},
        {"max_priority", "max-priority", "the highest priority your jobs may ask for"},
        {"share", "share", "your weight in fair share (1 unless set)"},
        {"rpm", "rpm", "requests a minute to the models behind the gateway"},
    };
    for (size_t i = 0; i < sizeof(says) / sizeof(says[0]); i++) {
        const json_t *v = json_object_get(k->limits, says[i].key);
        if (v)
            fprintf(f, "  %s %g: %s\n", says[i].flag, json_number_value(v),
                    says[i].text);
    }
    if (fclose(f) != 0)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    return 0;
}

/* The class's folder: made (mode 0700) unless it is there already; it must be
 * one we can write in. */
static int make_dir(const cli_t *cli, const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return cli_fail(cli, "--out %s: cannot make the folder: %s", dir,
                        strerror(errno));
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return cli_fail(cli, "--out %s: not a folder", dir);
    if (access(dir, W_OK | X_OK) < 0)
        return cli_fail(cli, "--out %s: cannot write in it: %s", dir, strerror(errno));
    return CLI_OK;
}

/* Every student was made: say so, and write the README. */
static int made_all(cli_t *cli, const making_t *k, int students)
{
    char first[NAME_MAX_LEN + 1], last[NAME_MAX_LEN + 1], lim[300];
    student_name(k, 0, first, sizeof(first));
    student_name(k, students - 1, last, sizeof(last));
    int one = students == 1;
    printf("class %s: made %d student(s), %s%s%s; limits: %s\n", k->klass, students,
           first, one ? "" : " .. ", one ? "" : last,
           cli_limits_text(k->limits, lim, sizeof(lim)));
    if (one)
        printf("credential: %s/%s.credential (mode 0600), to give to the student\n",
               k->dir, first);
    else
        printf("credentials: %s/%s.credential .. %s/%s.credential (mode 0600), one "
               "to give to each student\n",
               k->dir, first, k->dir, last);
    br_err_t err;
    if (write_readme(k, students, &err) < 0)
        return cli_fail(cli, "the students were made, but README.txt could not be "
                             "written: %s",
                        err.text);
    printf("for the students: %s/README.txt says how to use theirs\n", k->dir);
    return CLI_OK;
}

/* After a failure midway: which students the coordinator holds now (asked, not
 * guessed, since a request that got no answer may have been carried out), and
 * the one command that removes them. CLI_FAIL. */
static int left_over(cli_t *cli, const char *klass, long students)
{
    json_t *users = list_users(cli);
    json_t *made = users ? students_of(users, klass) : NULL;
    json_decref(users);
    if (!made)
        return cli_fail(cli,
                        "some of the class's students may have been made; 'bramble "
                        "class remove %s' removes whichever were",
                        klass);
    char names[200];
    size_t n = json_array_size(made);
    names_text(made, names, sizeof(names));
    json_decref(made);
    if (!n)
        return cli_fail(cli, "no student was made");
    return cli_fail(cli,
                    "made so far: %zu of the %ld students (%s); 'bramble class remove "
                    "%s' removes them, then create the class again",
                    n, students, names, klass);
}

/* Refuse a class whose name is taken: any user NAME-<number> already. */
static int class_free(cli_t *cli, const char *klass)
{
    json_t *users = list_users(cli);
    if (!users)
        return CLI_FAIL;
    json_t *taken = students_of(users, klass);
    json_decref(users);
    if (!taken)
        return cli_fail(cli, "out of memory");
    size_t n = json_array_size(taken);
    char names[200];
    names_text(taken, names, sizeof(names));
    json_decref(taken);
    if (n)
        return cli_fail(cli,
                        "class %s exists already: %zu user(s) named %s-<number> (%s); "
                        "'bramble class remove %s' removes them",
                        klass, n, klass, names, klass);
    return CLI_OK;
}

static int class_create_with(cli_t *cli, int argc, char **argv, json_t *limits)
{
    static const struct option opts[] = {{"students", required_argument, NULL, 'n'},
                                         {"out", required_argument, NULL, 'o'},
                                         {"endpoint", required_argument, NULL, 'e'},
                                         CLI_LIMIT_OPTS,
                                         {NULL, 0, NULL, 0}};
    static const char *names[] = {"class NAME"};
    const char *klass, *out = NULL, *endpoint = NULL, *students_arg = NULL;
    int c, took;
    long students;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'n')
            students_arg = optarg;
        else if (c == 'o')
            out = optarg;
        else if (c == 'e')
            endpoint = optarg;
        else if ((took = cli_limit_opt(cli, c, optarg, limits)) != 0)
            return took < 0 ? CLI_USAGE : cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 1, names, &klass) != 0)
        return CLI_USAGE;
    if (!students_arg)
        return cli_usage(cli, "give the number of students: --students N");
    if (cli_parse_long(cli, "--students", students_arg, 1, CLASS_MAX_STUDENTS,
                       &students) != 0)
        return CLI_USAGE;
    if (endpoint && cli_usercred_endpoint_ok(cli, endpoint) != 0)
        return CLI_USAGE;
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(limits, tmp, key, v) {
        if (json_is_null(v)) /* "none": a new user has no limit anyway */
            json_object_del(limits, key);
    }
    char last[32];
    int width = snprintf(last, sizeof(last), "%ld", students);
    if (!br_valid_name(klass))
        return cli_usage(cli,
                         "class name '%s': use lowercase letters, digits and '-', "
                         "starting with a letter or digit",
                         klass);
    if (strlen(klass) + 1 + (size_t)width > NAME_MAX_LEN)
        return cli_usage(cli,
                         "class name '%s' is too long: its students' names (%s-%s) "
                         "must fit in %d characters",
                         klass, klass, last, NAME_MAX_LEN);
    char dir[CLI_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", out ? out : klass);
    if (class_free(cli, klass) != CLI_OK || make_dir(cli, dir) != CLI_OK)
        return CLI_FAIL;

    making_t *k = calloc(1, sizeof(*k));
    if (!k)
        return cli_fail(cli, "out of memory");
    *k = (making_t){.cli = cli,
                    .klass = klass,
                    .dir = dir,
                    .endpoint = endpoint,
                    .width = width,
                    .limits = limits};
    /* the first alone: a refusal that would meet every student (a limit out of
     * range) is met once */
    int rc, failed = pipeline(cli, "user.add", 0, 1, make_body, made_one, k);
    if (!failed)
        failed = pipeline(cli, "user.add", 1, (int)students, make_body, made_one, k);
    if (failed) {
        if (k->failure[0])
            cli_err(cli, "%s", k->failure);
        rc = left_over(cli, klass, students);
    } else {
        rc = made_all(cli, k, (int)students);
    }
    explicit_bzero(k, sizeof(*k));
    free(k);
    return rc;
}

static int class_create(cli_t *cli, int argc, char **argv)
{
    json_t *limits = json_object();
    int rc = limits ? class_create_with(cli, argc, argv, limits) : CLI_FAIL;
    json_decref(limits);
    return rc;
}

/* ---- class remove */

typedef struct {
    const json_t *students;
    const char *jobs;
    int removed;
    long long active;
    char failure[BR_ERR_TEXT + 100];
} removing_t;

static json_t *remove_body(void *arg, int i, br_err_t *err)
{
    removing_t *r = arg;
    const char *name =
        json_string_value(json_object_get(json_array_get(r->students, i), "name"));
    json_t *body = json_pack("{s:s, s:s}", "name", name, "jobs", r->jobs);
    if (!body)
        br_errf(err, ENOMEM, "out of memory");
    return body;
}

static int removed_one(void *arg, int i, const json_t *reply, const br_err_t *err)
{
    removing_t *r = arg;
    if (!reply) {
        if (!r->failure[0])
            snprintf(r->failure, sizeof(r->failure), "%s was not removed: %s",
                     json_string_value(
                         json_object_get(json_array_get(r->students, i), "name")),
                     err->text);
        return -1;
    }
    r->removed++;
    r->active += json_integer_value(json_object_get(reply, "jobs"));
    return 0;
}

static int class_remove(cli_t *cli, int argc, char **argv)
{
    const char *klass, *jobs;
    int rc = cli_usercred_remove_args(cli, argc, argv, "class NAME", &klass, &jobs);
    if (rc)
        return rc;
    if (!br_valid_name(klass))
        return cli_usage(cli, "class name '%s': use lowercase letters, digits and '-'",
                         klass);
    json_t *users = list_users(cli);
    if (!users)
        return CLI_FAIL;
    json_t *students = students_of(users, klass);
    json_decref(users);
    if (!students)
        return cli_fail(cli, "out of memory");
    int n = (int)json_array_size(students);
    if (n == 0) {
        json_decref(students);
        return cli_fail(cli,
                        "no class '%s': no user is named %s-<number> ('bramble class "
                        "list' shows the classes)",
                        klass, klass);
    }
    removing_t r = {.students = students, .jobs = jobs};
    int failed = pipeline(cli, "user.remove", 0, n, remove_body, removed_one, &r);
    char text[200];
    rc = CLI_OK;
    if (failed && !r.failure[0]) {
        rc = CLI_FAIL;
    } else if (failed) {
        cli_err(cli, "%s", r.failure);
        rc = cli_fail(cli,
                      "%d of %d students were removed; run 'bramble class remove %s' "
                      "again for the rest",
                      r.removed, n, klass);
    } else {
        printf(
            "class %s: removed %d student(s), %s; their keys are revoked; %lld active "
            "job(s) %s\n",
            klass, n, names_text(students, text, sizeof(text)), r.active,
            strcmp(jobs, "admin") == 0 ? "handed to the admin" : "cancelled");
    }
    json_decref(students);
    return rc;
}

/* ---- class list */

static void class_row(cli_table_t *t, const json_t *k)
{
    char name[64], n[16], range[200], lim[300];
    cli_fmt_value(json_object_get(k, "name"), name, sizeof(name));
    cli_fmt_value(json_object_get(k, "students"), n, sizeof(n));
    const char *first = json_string_value(json_object_get(k, "first"));
    const char *last = json_string_value(json_object_get(k, "last"));
    if (strcmp(first, last) == 0)
        snprintf(range, sizeof(range), "%s", first);
    else
        snprintf(range, sizeof(range), "%s .. %s", first, last);
    const json_t *limits = json_object_get(k, "limits");
    const char *row[] = {name, n, range,
                         json_is_null(limits)
                             ? "differ (see bramble user list)"
                             : cli_limits_text(limits, lim, sizeof(lim))};
    cli_table_add(t, row);
}

/* The classes among users: [{"name", "students", "first", "last", "limits"
 * (null when the students' differ)}], by name. */
static json_t *classes_of(const json_t *users)
{
    json_t *seen = json_object(), *out = json_array();
    size_t i;
    json_t *u;
    json_array_foreach(users, i, u) {
        const char *name = json_string_value(json_object_get(u, "name"));
        const char *kind = json_string_value(json_object_get(u, "kind"));
        char klass[NAME_MAX_LEN + 1];
        if (!name || !kind || strcmp(kind, "user") != 0 ||
            !class_of(name, klass, sizeof(klass)) || json_object_get(seen, klass))
            continue;
        json_object_set_new(seen, klass, json_true());
        json_t *students = students_of(users, klass);
        size_t n = json_array_size(students);
        if (!n) {
            json_decref(students);
            continue;
        }
        json_t *limits = json_object_get(json_array_get(students, 0), "limits");
        for (size_t s = 1; s < n && limits; s++)
            if (!json_equal(limits,
                            json_object_get(json_array_get(students, s), "limits")))
                limits = NULL;
        json_array_append_new(
            out, json_pack("{s:s, s:I, s:O, s:O, s:O}", "name", klass, "students",
                           (json_int_t)n, "first",
                           json_object_get(json_array_get(students, 0), "name"), "last",
                           json_object_get(json_array_get(students, n - 1), "name"),
                           "limits", limits ? limits : json_null()));
        json_decref(students);
    }
    json_decref(seen);
    return out;
}

static int class_list(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *users = list_users(cli);
    if (!users)
        return CLI_FAIL;
    json_t *classes = classes_of(users);
    json_decref(users);
    static const char *head[] = {"CLASS", "STUDENTS", "NAMES", "LIMITS"};
    cli_print_list(classes, json, 4, head, class_row);
    json_decref(classes);
    return CLI_OK;
}

const cli_cmd_t cli_class_cmds[] = {
    {"class", "create", class_create,
     "NAME --students N [--out DIR] [--endpoint tcp://HOST:PORT] [LIMITS]",
     "make a class: N students, each with a credential (admin)",
     "Makes N users, NAME-1 .. NAME-N with the numbers zero-padded to the width of\n"
     "N (--students 30: NAME-01 .. NAME-30), each with the same LIMITS, and writes\n"
     "each one's credential (mode 0600) to DIR/NAME-01.credential and so on, with\n"
     "DIR/README.txt telling a student how to use theirs. DIR is made if missing.\n"
     "A class whose name is taken (any user NAME-<number> exists) is refused and\n"
     "nothing is made. Should a student not be made midway, the command says which\n"
     "were; 'bramble class remove NAME' removes them all.\n"
     "\nOptions:\n"
     "  --students N      how many students (1 to 1000)\n"
     "  --out DIR         where to write the credentials (default ./NAME)\n"
     "  --endpoint EP     the coordinator's address written into the credentials\n"
     "                    (tcp://HOST:PORT; default: the one it advertises)\n"
     "  LIMITS            each student's, as for user set: --max-gpus N,\n"
     "                    --max-jobs N, --max-pending N, --gpu-hours-week H,\n"
     "                    --max-priority P, --share W, --rpm N (docs/sharing.md)\n"},
    {"class", "remove", class_remove, "NAME [--jobs cancel|admin]",
     "remove a class's students; their keys are revoked at once (admin)",
     "Removes every user named NAME-<number>, as user remove does: their next\n"
     "request is refused. Prints how many were removed. Their credential files\n"
     "are left where they are, and are of no use any more.\n"
     "\nOptions:\n"
     "  --jobs cancel|admin   what happens to the students' active jobs (default\n"
     "                        cancel)\n"},
    {"class", "list", class_list, "[--json]",
     "list the classes: their students and limits (admin)",
     "A class is every user named NAME-<number>. Table columns: CLASS STUDENTS\n"
     "NAMES LIMITS (the students' limits when they are all the same).\n"
     "\nOptions:\n"
     "  --json   print the array of classes: name, students, first, last, limits\n"
     "           (null when the students' limits differ)\n"},
    {0},
};
