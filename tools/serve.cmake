# qrun serve: the OpenAI-compatible HTTP server (tools/serve.h lists its
# files), built on include/qpack.h and libmicrohttpd, linked into qrun.
# serve_page.html becomes a C string at build time (cmake/embed_file.cmake).
set(_serve_page_c ${CMAKE_CURRENT_BINARY_DIR}/serve_page.c)
add_custom_command(OUTPUT ${_serve_page_c}
    COMMAND ${CMAKE_COMMAND} -DIN=${CMAKE_CURRENT_LIST_DIR}/serve_page.html -DOUT=${_serve_page_c}
            -DNAME=serve_page_html -P ${CMAKE_SOURCE_DIR}/cmake/embed_file.cmake
    DEPENDS ${CMAKE_CURRENT_LIST_DIR}/serve_page.html ${CMAKE_SOURCE_DIR}/cmake/embed_file.cmake
    COMMENT "serve_page.c" VERBATIM)

add_library(qpserve STATIC
    ${CMAKE_CURRENT_LIST_DIR}/serve.c
    ${CMAKE_CURRENT_LIST_DIR}/serve_http.c
    ${CMAKE_CURRENT_LIST_DIR}/serve_openai.c
    ${CMAKE_CURRENT_LIST_DIR}/serve_sched.c
    ${CMAKE_CURRENT_LIST_DIR}/serve_metrics.c
    ${_serve_page_c})
target_include_directories(qpserve PUBLIC ${CMAKE_CURRENT_LIST_DIR})
# qpcli: stop_text.h; qpformats: cli_out.h (--help, --version) and json_strict.h
target_link_libraries(qpserve PUBLIC qpack_api qpcli PRIVATE qpformats PkgConfig::MHD PkgConfig::CJSON
                      PkgConfig::UTF8PROC Threads::Threads m)
target_link_libraries(qrun PRIVATE qpserve)
