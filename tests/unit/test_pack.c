/* test_pack.c - the packer (cli/pack/): in real git repositories it sends exactly
 * what `git ls-files --cached --others --exclude-standard` lists, checked against
 * git itself on random trees with random .gitignore, info/exclude and global
 * excludes files, tracked files git ignores, links, and subdirectories packed on
 * their own; .brambleignore wins both ways; .git is never sent; a link out of the
 * tree, a socket, a fifo and an unreadable file are refused by name; and its
 * manifest is byte for byte the one the agent builds of the same tree.
 * BR_PACK_TREES sets how many random trees (default 100); BR_PACK_SEED the seed;
 * BR_PACK_REPOS (colon-separated work trees) more real repositories to compare, besides
 * this source tree when it is a git checkout. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "manifest.h"
#include "pack.h"

static char ROOT[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0)
        fail_msg("'%s' exited %d", cmd, rc);
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* --- lists ---------------------------------------------------------------------- */

typedef struct {
    char **s;
    size_t n, cap;
} list_t;

static void list_add(list_t *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->s = realloc(l->s, l->cap * sizeof(*l->s));
        assert_non_null(l->s);
    }
    l->s[l->n++] = strdup(s);
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_free(list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->s[i]);
    free(l->s);
    memset(l, 0, sizeof(*l));
}

/* What git lists in dir, relative to dir. */
static list_t git_list(const char *dir)
{
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof(cmd),
             "git -C '%s' ls-files -z --cached --others --exclude-standard", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    list_t l = {0};
    char buf[PATH_MAX];
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (c == '\0') {
            buf[n] = '\0';
            if (!l.n || strcmp(l.s[l.n - 1], buf) != 0) /* one line per merge stage */
                list_add(&l, buf);
            n = 0;
        } else if (n + 1 < sizeof(buf))
            buf[n++] = (char)c;
    }
    assert_int_equal(pclose(f), 0);
    if (l.n)
        qsort(l.s, l.n, sizeof(*l.s), by_text);
    return l;
}

/* What the packer sends of dir: 0 with *out, or -1 with err. */
static int pack_list(const char *dir, list_t *out, br_err_t *err)
{
    br_pack_t *p = br_pack_new(NULL, err);
    assert_non_null(p);
    const json_t *m = NULL;
    memset(out, 0, sizeof(*out));
    if (br_pack_dir(p, dir, "", err) == 0 && (m = br_pack_manifest(p, err))) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(m, "entries"), i, e)
            list_add(out, json_string_value(json_object_get(e, "path")));
    }
    br_pack_destroy(&p);
    return m ? 0 : -1;
}

/* 1 when they hold the same paths; else the differences are printed. */
static int same(const list_t *git, const list_t *ours, const char *what)
{
    size_t i = 0, j = 0;
    int ok = 1;
    while (i < git->n || j < ours->n) {
        int c = i == git->n ? 1 : j == ours->n ? -1 : strcmp(git->s[i], ours->s[j]);
        if (c == 0) {
            i++;
            j++;
            continue;
        }
        printf("%s: %s lists %s\n", what, c < 0 ? "only git" : "only the packer",
               c < 0 ? git->s[i] : ours->s[j]);
        if (c < 0)
            i++;
        else
            j++;
        ok = 0;
    }
    return ok;
}

/* --- random trees --------------------------------------------------------------- */

static const char *NAMES[] = {"a",     "b",     "ab",   "ba",    "c.txt", "d.py",
                              "e.log", "x",     "build", "data", "sub",   "#h",
                              "!e",    "sp ace", "caf\xc3\xa9", "B"};
static const char *PATTERNS[] = {
    "*.txt",  "a",        "a/",       "/a",        "b/*",       "**/ab",    "a/**",
    "!c.txt", "!a/",      "*.py",     "b?",        "[ab]*",     "a/**/b",   "\\#h",
    "\\!e",   "# note",   "",         "*/",        "!*/",       "!**/d.py", "c*",
    "/sub/x", "sub/",     "data/",    "!data/x",   "x/",        "*.log",    "!e.log",
    "**/x/**", "ab/",     "!/b",      "sp\\ ace",  "d*   ",     "[!a]*",    "?",
    "**",     "!x",       "sub/**/a", "*/x",       "[[:upper:]]", "caf*",   "build",
};

#define NNAMES (sizeof(NAMES) / sizeof(NAMES[0]))
#define NPATTERNS (sizeof(PATTERNS) / sizeof(PATTERNS[0]))

static void write_rules(const char *path, unsigned *seed, int most)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    int n = 1 + rand_r(seed) % most;
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\n", PATTERNS[rand_r(seed) % NPATTERNS]);
    fclose(f);
}

/* A random tree below dir, depth levels more; the files made go into files. */
static void grow(const char *dir, int depth, unsigned *seed, list_t *files)
{
    int n = 1 + rand_r(seed) % 5;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, NAMES[rand_r(seed) % NNAMES]);
        struct stat st;
        if (lstat(path, &st) == 0)
            continue;
        int kind = rand_r(seed) % 10;
        if (depth > 0 && kind < 4) {
            assert_int_equal(mkdir(path, 0755), 0);
            grow(path, depth - 1, seed, files);
        } else if (kind == 4 && i > 0) { /* a link to a sibling */
            assert_int_equal(symlink(NAMES[rand_r(seed) % NNAMES], path), 0);
        } else {
            put(path, "some bytes\n");
            list_add(files, path);
        }
    }
    if (rand_r(seed) % 2) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/.gitignore", dir);
        write_rules(path, seed, 5);
    }
}

/* Whether git ignores dir (in repo) or a directory above it: the packer sends a
 * directory it is asked to pack whole (docs/files.md), git lists nothing of it. */
static int ignored(const char *repo, const char *dir)
{
    char rel[PATH_MAX], cmd[PATH_MAX * 3];
    snprintf(rel, sizeof(rel), "%s", dir + strlen(repo) + 1);
    for (char *at = rel;; at++) {
        if (*at == '/' || *at == '\0') {
            char keep = *at;
            *at = '\0';
            snprintf(cmd, sizeof(cmd), "git -C '%s' check-ignore -q --no-index -- '%s/'",
                     repo, rel);
            int rc = system(cmd);
            *at = keep;
            if (rc == 0)
                return 1;
        }
        if (!*at)
            return 0;
    }
}

static void one_tree(unsigned seed, int *bad)
{
    unsigned s = seed;
    char repo[PATH_MAX], home[PATH_MAX], path[PATH_MAX * 2];
    snprintf(repo, sizeof(repo), "%s/repo-%u", ROOT, seed);
    snprintf(home, sizeof(home), "%s/home", ROOT);
    rm_tree(home);
    sh("mkdir -p '%s/.config/git' && git init -q '%s'", home, repo);
    list_t files = {0};
    grow(repo, 3, &s, &files);
    if (rand_r(&s) % 2) {
        snprintf(path, sizeof(path), "%s/.git/info/exclude", repo);
        write_rules(path, &s, 3);
    }
    if (rand_r(&s) % 2) {
        snprintf(path, sizeof(path), "%s/.config/git/ignore", home);
        write_rules(path, &s, 3);
    }
    for (size_t i = 0; i < files.n && files.n; i++) /* some tracked, ignored or not */
        if (rand_r(&s) % 4 == 0)
            sh("git -C '%s' add -f -- '%s'", repo, files.s[i] + strlen(repo) + 1);
    /* the whole tree, and each of its subdirectories on its own */
    list_t dirs = {0};
    list_add(&dirs, repo);
    for (size_t i = 0; i < files.n; i++) {
        char *slash = strrchr(files.s[i], '/');
        if (slash && (size_t)(slash - files.s[i]) > strlen(repo)) {
            *slash = '\0';
            if (strcmp(dirs.s[dirs.n - 1], files.s[i]) != 0)
                list_add(&dirs, files.s[i]);
        }
    }
    for (size_t i = 0; i < dirs.n; i++) {
        if (i > 0 && (strcmp(dirs.s[i], dirs.s[i - 1]) == 0 || ignored(repo, dirs.s[i])))
            continue;
        list_t git = git_list(dirs.s[i]), ours;
        br_err_t err = {0};
        char what[PATH_MAX + 64];
        snprintf(what, sizeof(what), "seed %u, %s", seed, dirs.s[i] + strlen(ROOT) + 1);
        if (pack_list(dirs.s[i], &ours, &err) < 0) {
            printf("%s: the packer refused: %s\n", what, err.text);
            (*bad)++;
        } else if (!same(&git, &ours, what))
            (*bad)++;
        list_free(&git);
        list_free(&ours);
    }
    list_free(&dirs);
    list_free(&files);
    if (!*bad)
        rm_tree(repo);
}

static void test_random_trees_list_what_git_lists(void **state)
{
    const char *n_env = getenv("BR_PACK_TREES"), *seed_env = getenv("BR_PACK_SEED");
    int trees = n_env ? atoi(n_env) : 100;
    unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10)
                             : (unsigned)time(NULL) ^ (unsigned)getpid();
    printf("random trees: %d from seed %u (BR_PACK_SEED=%u to repeat)\n", trees, seed,
           seed);
    int bad = 0;
    for (int i = 0; i < trees && bad == 0; i++)
        one_tree(seed + (unsigned)i, &bad);
    assert_int_equal(bad, 0);
}

/* No global excludes left from a random tree. */
static void fresh_home(void)
{
    char home[PATH_MAX];
    snprintf(home, sizeof(home), "%s/home", ROOT);
    rm_tree(home);
}

/* Real repositories: this source tree (when it is a checkout) and BR_PACK_REPOS. */
static void test_real_repositories(void **state)
{
    char list[8192], dotgit[PATH_MAX];
    snprintf(dotgit, sizeof(dotgit), "%s/.git", BR_SOURCE_DIR);
    snprintf(list, sizeof(list), "%s:%s", access(dotgit, F_OK) == 0 ? BR_SOURCE_DIR : "",
             getenv("BR_PACK_REPOS") ? getenv("BR_PACK_REPOS") : "");
    int bad = 0, seen = 0;
    fresh_home();
    for (char *save = NULL, *dir = strtok_r(list, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        list_t git = git_list(dir), ours;
        br_err_t err = {0};
        if (pack_list(dir, &ours, &err) < 0) {
            printf("%s: the packer refused: %s\n", dir, err.text);
            bad++;
        } else if (!same(&git, &ours, dir))
            bad++;
        else
            printf("%s: %zu paths, as git lists them\n", dir, git.n);
        seen++;
        list_free(&git);
        list_free(&ours);
    }
    if (!seen)
        skip();
    assert_int_equal(bad, 0);
}

/* --- chosen cases --------------------------------------------------------------- */

static char *make_repo(const char *name)
{
    static char repo[PATH_MAX];
    fresh_home();
    snprintf(repo, sizeof(repo), "%s/%s", ROOT, name);
    sh("git init -q '%s'", repo);
    return repo;
}

/* A worktree made by `git worktree add` (a .git file) and a repository whose
 * index is format 4 read like any other. */
static void test_worktree_and_index_v4(void **state)
{
    char *repo = make_repo("wt");
    char path[PATH_MAX * 2];
    sh("cd '%s' && mkdir -p src deep/er && echo 1 > src/a.py && echo 2 > deep/er/b.txt "
       "&& echo '*.txt' > .gitignore && git add -A && git add -f deep/er/b.txt && "
       "git -c user.name=t -c user.email=t@t commit -qm one && "
       "git update-index --index-version 4 && echo 3 > new.py",
       repo);
    list_t git = git_list(repo), ours;
    assert_int_equal(pack_list(repo, &ours, NULL), 0);
    assert_true(same(&git, &ours, "index v4"));
    assert_int_equal(git.n, 4); /* .gitignore, deep/er/b.txt, new.py, src/a.py */
    list_free(&git);
    list_free(&ours);
    snprintf(path, sizeof(path), "%s/wt-linked", ROOT);
    sh("cd '%s' && git worktree add -q '%s' && echo 4 > '%s/untracked.py'", repo, path,
       path);
    git = git_list(path);
    assert_int_equal(pack_list(path, &ours, NULL), 0);
    assert_true(same(&git, &ours, "worktree"));
    list_free(&git);
    list_free(&ours);
}

/* .brambleignore adds rules and wins over git's both ways; .git is never sent. */
static void test_brambleignore(void **state)
{
    char *repo = make_repo("bi");
    sh("cd '%s' && mkdir -p data sub && echo w > data/weights.bin && echo t > big.bin "
       "&& echo c > sub/code.py && echo s > sub/scratch.tmp && printf 'data/\\n' > "
       ".gitignore && git add -A && git add -f big.bin && "
       "printf '!data/\\nbig.bin\\n' > .brambleignore && printf '*.tmp\\n' > "
       "sub/.brambleignore",
       repo);
    list_t ours;
    assert_int_equal(pack_list(repo, &ours, NULL), 0);
    const char *want[] = {".brambleignore", ".gitignore", "data/weights.bin",
                          "sub/.brambleignore", "sub/code.py"};
    assert_int_equal(ours.n, 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(ours.s[i], want[i]);
    list_free(&ours);

    char plain[PATH_MAX];
    snprintf(plain, sizeof(plain), "%s/plain", ROOT);
    sh("mkdir -p '%s/.git/objects' '%s/m' && echo x > '%s/.git/HEAD-not' && echo y > "
       "'%s/m/.git' && echo z > '%s/run.py' && echo '*.log' > '%s/.gitignore' && echo l "
       "> '%s/a.log'",
       plain, plain, plain, plain, plain, plain, plain);
    br_pack_t *p = br_pack_new(NULL, NULL);
    assert_int_equal(br_pack_dir(p, plain, "", NULL), 0);
    assert_false(br_pack_in_git(p));
    const json_t *m = br_pack_manifest(p, NULL);
    assert_int_equal(json_integer_value(json_object_get(m, "files")), 2);
    const char *const *names;
    assert_int_equal(br_pack_left_out(p, &names), 1);
    assert_string_equal(names[0], "a.log");
    br_pack_destroy(&p);
}

static int pack_error(const char *dir, br_err_t *err)
{
    list_t ours;
    int rc = pack_list(dir, &ours, err);
    list_free(&ours);
    return rc;
}

/* A link that stays inside is kept as a link; one that leaves (by its text, through
 * another link, or absolute) is refused, naming it, unless it is left out. */
static void test_links(void **state)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/links", ROOT);
    sh("mkdir -p '%s/t/in' && cd '%s/t' && echo x > in/f && ln -s in/f ok && "
       "ln -s missing dangling && ln -s . self",
       dir, dir);
    snprintf(dir, sizeof(dir), "%s/links/t", ROOT);
    br_pack_t *p = br_pack_new(NULL, NULL);
    assert_int_equal(br_pack_dir(p, dir, "code", NULL), 0);
    const json_t *m = br_pack_manifest(p, NULL);
    json_t *ok = json_array_get(json_object_get(m, "entries"), 2);
    assert_string_equal(json_string_value(json_object_get(ok, "path")), "code/ok");
    assert_string_equal(json_string_value(json_object_get(ok, "link")), "in/f");
    char src[PATH_MAX * 2];
    snprintf(src, sizeof(src), "%s/in/f", dir);
    char real[PATH_MAX];
    assert_non_null(realpath(src, real));
    assert_string_equal(br_pack_source(p, "code/in/f"), real);
    br_pack_destroy(&p);

    const char *escapes[] = {"ln -s ../outside up", "ln -s /etc/passwd abs",
                             "ln -s self/.. via", "ln -s in/../../t2 around"};
    for (size_t i = 0; i < sizeof(escapes) / sizeof(escapes[0]); i++) {
        sh("cd '%s' && %s", dir, escapes[i]);
        br_err_t err = {0};
        assert_int_equal(pack_error(dir, &err), -1);
        const char *name = strrchr(escapes[i], ' ') + 1;
        printf("%s: %s\n", escapes[i], err.text);
        assert_non_null(strstr(err.text, name));
        assert_non_null(strstr(err.text, "a link out of the tree"));
        sh("cd '%s' && echo '%s' > .brambleignore", dir, name);
        assert_int_equal(pack_error(dir, &err), 0);
        sh("cd '%s' && rm -f '%s' .brambleignore", dir, name);
    }
}

/* A socket, a fifo and a file that cannot be read are refused by name. */
static void test_specials_refused(void **state)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/special", ROOT);
    sh("mkdir -p '%s' && echo x > '%s/run.py' && mkfifo '%s/pipe'", dir, dir, dir);
    br_err_t err = {0};
    assert_int_equal(pack_error(dir, &err), -1);
    assert_non_null(strstr(err.text, "special/pipe is a fifo"));
    sh("rm '%s/pipe'", dir);
    if (geteuid() == 0) { /* a device, as root may make one (mknod): the null device's */
        sh("mknod '%s/null' c 1 3", dir);
        assert_int_equal(pack_error(dir, &err), -1);
        assert_non_null(strstr(err.text, "special/null is a character device"));
        sh("rm '%s/null'", dir);
    }

    char sock_path[PATH_MAX];
    snprintf(sock_path, sizeof(sock_path), "%s/s.sock", dir);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(pack_error(dir, &err), -1);
    assert_non_null(strstr(err.text, "s.sock is a socket"));
    assert_non_null(strstr(err.text, ".brambleignore"));
    put(strcat(strcpy((char[PATH_MAX]){0}, dir), "/.gitignore"), "*.sock\n");
    assert_int_equal(pack_error(dir, &err), 0); /* ignored: not looked at */
    close(s);
    unlink(sock_path);

    /* unreadable: as a user who may not read it (root reads anything) */
    sh("mkdir -p '%s/locked' && chmod 755 '%s' '%s/locked' && echo k > "
       "'%s/locked/key' && chmod 600 '%s/locked/key' && chmod 755 '%s' && "
       "chmod o+x '%s'",
       dir, ROOT, dir, dir, dir, dir, ROOT);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
            _exit(3);
        br_err_t e = {0};
        int rc = pack_error(dir, &e);
        printf("unreadable: %s\n", e.text);
        _exit(rc == -1 && strstr(e.text, "locked/key cannot be read") ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* The manifest of a tree with nothing to leave out is the agent's, byte for byte. */
static void test_same_manifest_as_agent(void **state)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/same", ROOT);
    sh("mkdir -p '%s/a/b' && cd '%s' && echo 1 > a/b/one && head -c 3000000 /dev/zero "
       "> big && ln -s a/b/one l && chmod 751 a/b/one",
       dir, dir);
    br_pack_t *p = br_pack_new(NULL, NULL);
    assert_int_equal(br_pack_dir(p, dir, "", NULL), 0);
    const json_t *ours = br_pack_manifest(p, NULL);
    br_err_t err = {0};
    json_t *agent = br_manifest_build(NULL, dir, NULL, NULL, &err);
    assert_non_null(agent);
    assert_true(json_equal(ours, agent));
    const char *path[2];
    int64_t size[2];
    assert_int_equal(br_pack_largest(p, 2, path, size), 2);
    assert_string_equal(path[0], "big");
    assert_int_equal(size[0], 3000000);
    json_decref(agent);
    br_pack_destroy(&p);
}

static int setup(void **state)
{
    snprintf(ROOT, sizeof(ROOT), "/tmp/test_pack.XXXXXX");
    if (!mkdtemp(ROOT))
        return -1;
    char home[PATH_MAX];
    snprintf(home, sizeof(home), "%s/home", ROOT);
    setenv("HOME", home, 1);
    setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
    unsetenv("XDG_CONFIG_HOME");
    unsetenv("GIT_DIR");
    unsetenv("GIT_WORK_TREE");
    unsetenv("GIT_INDEX_FILE");
    return 0;
}

static int teardown(void **state)
{
    rm_tree(ROOT);
    return 0;
}

int main(void)
{
    if (system("git --version >/dev/null 2>&1") != 0) {
        printf("git is not installed: the packer cannot be checked against it\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_trees_list_what_git_lists),
        cmocka_unit_test(test_real_repositories),
        cmocka_unit_test(test_worktree_and_index_v4),
        cmocka_unit_test(test_brambleignore),
        cmocka_unit_test(test_links),
        cmocka_unit_test(test_specials_refused),
        cmocka_unit_test(test_same_manifest_as_agent),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
