"""The second pass of the client suites (LARDER_TEST_IO set) leaves out only
the tests that talk to memcached alone: `talks_to_memcached_alone` in
conftest.py, on items shaped as pytest collects them."""

from types import SimpleNamespace

from conftest import talks_to_memcached_alone


def item(test_name, **params):
    """A collected test as the predicate sees it: its name and, when
    parametrised, its parameters."""
    if not params:
        return SimpleNamespace(name=test_name)
    return SimpleNamespace(name=test_name, callspec=SimpleNamespace(params=params))


def test_a_test_parametrised_with_memcached_as_its_server_is_left_out():
    assert talks_to_memcached_alone(item("test_set_add_replace[memcached]", server="memcached"))
    assert talks_to_memcached_alone(item("test_flush[memcached]", own_server="memcached"))
    assert talks_to_memcached_alone(item("test_commands[memcached]", name="memcached"))
    assert talks_to_memcached_alone(
        item("test_malformed[memcached-short]", server="memcached", name="short")
    )


def test_a_test_named_as_checking_memcached_itself_is_left_out():
    assert talks_to_memcached_alone(
        item("test_client_checks_pass_against_memcached[go-gomemcache]", program="go")
    )


def test_tests_that_talk_to_larder_are_kept():
    assert not talks_to_memcached_alone(item("test_set_add_replace[larder]", server="larder"))
    assert not talks_to_memcached_alone(
        item("test_malformed[larder-memcached]", server="larder", name="memcached_like")
    )
    assert not talks_to_memcached_alone(
        item("test_client_checks_pass_against_larder[go-gomemcache]", program="go")
    )
    # Compares Larder's replies with memcached's: it talks to both.
    assert not talks_to_memcached_alone(
        item("test_reply_matches_memcached[set_get]", case="set_get")
    )
    assert not talks_to_memcached_alone(item("test_restart_keeps_everything"))
