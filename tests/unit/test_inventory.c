/* test_inventory.c - the node inventory: every field present and sane. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "inventory.h"

static const char *str_field(json_t *inv, const char *key)
{
    json_t *v = json_object_get(inv, key);
    if (!json_is_string(v))
        fail_msg("inventory field '%s' is not a string", key);
    return json_string_value(v);
}

static void test_collect(void **state)
{
    br_err_t err = {0};
    json_t *inv = br_inventory_collect(&err);
    assert_non_null(inv);
    assert_true(json_is_object(inv));

    struct utsname u;
    assert_int_equal(uname(&u), 0);
    char host[HOST_NAME_MAX + 1] = "";
    assert_int_equal(gethostname(host, sizeof(host)), 0);
    assert_string_equal(str_field(inv, "hostname"), host);
    assert_string_equal(str_field(inv, "arch"), u.machine);
    assert_string_equal(str_field(inv, "kernel"), u.release);
    assert_true(strlen(str_field(inv, "os")) > 0);
#ifdef BRAMBLE_VERSION
    assert_string_equal(str_field(inv, "agent_version"), BRAMBLE_VERSION);
#else
    assert_true(strlen(str_field(inv, "agent_version")) > 0);
#endif

    json_t *cpus = json_object_get(inv, "cpus");
    assert_true(json_is_integer(cpus));
    long conf = sysconf(_SC_NPROCESSORS_CONF);
    assert_in_range(json_integer_value(cpus), 1, conf > 0 ? conf : 1 << 16);

    json_t *mem = json_object_get(inv, "memory");
    assert_true(json_is_integer(mem));
    long long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    assert_true(json_integer_value(mem) >= 64LL << 20);
    assert_int_equal(json_integer_value(mem), pages * page);

    assert_int_equal(json_object_size(inv), 7);
    json_decref(inv);
}

/* The interface that holds an address: loopback's for 127.0.0.1; none for an
 * address this host does not have, a host name (never looked up) or a buffer too
 * small. */
static void test_iface_of(void **state)
{
    (void)state;
    char name[64];
    assert_int_equal(br_inventory_iface_of("127.0.0.1", name, sizeof(name)), 0);
    assert_string_equal(name, "lo");
    assert_int_equal(br_inventory_iface_of("203.0.113.77", name, sizeof(name)), -1);
    assert_int_equal(br_inventory_iface_of("localhost", name, sizeof(name)), -1);
    assert_int_equal(br_inventory_iface_of("", name, sizeof(name)), -1);
    assert_int_equal(br_inventory_iface_of(NULL, name, sizeof(name)), -1);
    assert_int_equal(br_inventory_iface_of("127.0.0.1", name, 2), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iface_of),
        cmocka_unit_test(test_collect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
