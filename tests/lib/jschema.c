/*
 * jschema.c - a JSON-schema check of the tests' own, and the schemas the
 * grammar tests generate from (jschema.h).
 */
#include "jschema.h"

#include <math.h>
#include <string.h>

static size_t
utf8_chars(const char *s, size_t n)
{
	size_t i, c = 0;

	for (i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

static bool
json_same(const struct json *a, const struct json *b)
{
	size_t i;

	if (a->type != b->type)
		return false;
	switch (a->type) {
	case JSON_NULL:
		return true;
	case JSON_BOOL:
		return a->b == b->b;
	case JSON_NUMBER:
		return a->num == b->num;
	case JSON_STRING:
		return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
	default:
		if (a->n != b->n)
			return false;
		for (i = 0; i < a->n; i++)
			if ((a->type == JSON_OBJECT &&
			    strcmp(a->keys[i], b->keys[i]) != 0) ||
			    !json_same(&a->items[i], &b->items[i]))
				return false;
		return true;
	}
}

static bool
type_is(const char *t, const struct json *v)
{
	if (strcmp(t, "integer") == 0)
		return v->type == JSON_NUMBER && v->num == floor(v->num);
	return (strcmp(t, "null") == 0 && v->type == JSON_NULL) ||
	    (strcmp(t, "boolean") == 0 && v->type == JSON_BOOL) ||
	    (strcmp(t, "number") == 0 && v->type == JSON_NUMBER) ||
	    (strcmp(t, "string") == 0 && v->type == JSON_STRING) ||
	    (strcmp(t, "array") == 0 && v->type == JSON_ARRAY) ||
	    (strcmp(t, "object") == 0 && v->type == JSON_OBJECT);
}

bool
jschema_valid(const struct json *root, const struct json *s, const struct json *v,
    const char **why)
{
	const struct json *k, *p, *x;
	size_t i, j;
	bool any;

	if ((k = json_get(s, "$ref")) != NULL) {
		const char *ref = k->str + strlen("#/$defs/");

		return jschema_valid(root, json_get(json_get(root, "$defs"), ref), v,
		    why);
	}
	if ((k = json_get(s, "type")) != NULL) {
		any = false;
		if (k->type == JSON_STRING)
			any = type_is(k->str, v);
		for (i = 0; k->type == JSON_ARRAY && i < k->n; i++)
			any |= type_is(k->items[i].str, v);
		if (!any)
			return *why = "type", false;
	}
	if ((k = json_get(s, "const")) != NULL && !json_same(k, v))
		return *why = "const", false;
	if ((k = json_get(s, "enum")) != NULL) {
		for (i = 0, any = false; i < k->n; i++)
			any |= json_same(&k->items[i], v);
		if (!any)
			return *why = "enum", false;
	}
	if ((k = json_get(s, "anyOf")) != NULL) {
		for (i = 0, any = false; i < k->n; i++)
			any |= jschema_valid(root, &k->items[i], v, why);
		if (!any)
			return *why = "anyOf", false;
	}
	if (v->type == JSON_NUMBER) {
		if ((k = json_get(s, "minimum")) != NULL && v->num < k->num)
			return *why = "minimum", false;
		if ((k = json_get(s, "maximum")) != NULL && v->num > k->num)
			return *why = "maximum", false;
	}
	if (v->type == JSON_STRING) {
		if ((k = json_get(s, "minLength")) != NULL &&
		    utf8_chars(v->str, v->len) < (size_t)k->num)
			return *why = "minLength", false;
		if ((k = json_get(s, "maxLength")) != NULL &&
		    utf8_chars(v->str, v->len) > (size_t)k->num)
			return *why = "maxLength", false;
	}
	if (v->type == JSON_ARRAY) {
		if ((k = json_get(s, "minItems")) != NULL && v->n < k->num)
			return *why = "minItems", false;
		if ((k = json_get(s, "maxItems")) != NULL && v->n > k->num)
			return *why = "maxItems", false;
		if ((k = json_get(s, "items")) != NULL)
			for (i = 0; i < v->n; i++)
				if (!jschema_valid(root, k, &v->items[i], why))
					return false;
	}
	if (v->type == JSON_OBJECT) {
		p = json_get(s, "properties");
		k = json_get(s, "required");
		for (i = 0; k != NULL && i < k->n; i++)
			if (json_get(v, k->items[i].str) == NULL)
				return *why = "required", false;
		for (i = 0; i < v->n; i++) {
			x = p != NULL ? json_get(p, v->keys[i]) : NULL;
			if (x == NULL) {
				k = json_get(s, "additionalProperties");
				if (k != NULL && k->type == JSON_BOOL && !k->b)
					return *why = "additionalProperties",
					    false;
				continue;
			}
			if (!jschema_valid(root, x, &v->items[i], why))
				return false;
			for (j = 0; j < i; j++)
				if (strcmp(v->keys[j], v->keys[i]) == 0)
					return *why = "duplicate key", false;
		}
	}
	return true;
}

const char *const jschema_tests[JSCHEMA_TESTS] = {
	"{\"type\":\"object\",\"properties\":{"
	    "\"name\":{\"type\":\"string\",\"maxLength\":12},"
	    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
	    "\"email\":{\"type\":\"string\",\"maxLength\":16}},"
	    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},"
	    "\"code\":{\"type\":\"integer\",\"minimum\":-50,\"maximum\":50}},"
	    "\"required\":[\"ok\",\"code\"],\"additionalProperties\":false}",
	"{\"enum\":[\"red\",\"green\",\"blue\"]}",
	"{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,"
	    "\"maximum\":999},\"minItems\":1,\"maxItems\":4}",
	"{\"type\":\"object\",\"properties\":{\"point\":{\"type\":\"object\","
	    "\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":-10,"
	    "\"maximum\":10},\"y\":{\"type\":\"integer\",\"minimum\":-10,"
	    "\"maximum\":10}},\"required\":[\"x\",\"y\"],"
	    "\"additionalProperties\":false},\"label\":{\"type\":\"string\","
	    "\"maxLength\":6}},\"required\":[\"point\"],"
	    "\"additionalProperties\":false}",
	"{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\",\"maxLength\":5},"
	    "{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}]}",
	"{\"$defs\":{\"item\":{\"type\":\"object\",\"properties\":{"
	    "\"id\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},"
	    "\"tag\":{\"enum\":[\"a\",\"b\"]}},\"required\":[\"id\",\"tag\"],"
	    "\"additionalProperties\":false}},\"type\":\"array\","
	    "\"items\":{\"$ref\":\"#/$defs/item\"},\"maxItems\":3}",
	"{\"type\":\"object\",\"properties\":{\"version\":{\"const\":2},"
	    "\"kind\":{\"const\":\"x\"}},\"required\":[\"version\",\"kind\"],"
	    "\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"score\":{\"type\":\"number\"},"
	    "\"weight\":{\"type\":\"number\",\"minimum\":0}},"
	    "\"required\":[\"score\"],\"additionalProperties\":false}",
	"{\"type\":\"object\",\"properties\":{\"flag\":{\"type\":[\"boolean\","
	    "\"null\"]},\"code\":{\"type\":\"string\",\"minLength\":2,"
	    "\"maxLength\":4}},\"required\":[\"flag\",\"code\"],"
	    "\"additionalProperties\":false}",
};

